#include "io/atomic_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "core/error.h"
#include "io/file_util.h"
#include "io/staging.h"

namespace kdtrain::io {

namespace fs = std::filesystem;

namespace {

// Children first, so each directory is synced after the entries inside it.
void fsync_tree(const fs::path& dir) {
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_directory()) {
      fsync_tree(e.path());
    } else if (e.is_regular_file()) {
      fsync_file(e.path().string());
    }
  }
  fsync_directory(dir.string());
}

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

StagedDir::StagedDir(const std::string& final_dir)
    : final_(strip_trailing_slashes(final_dir)), staging_(sibling_staging_path(final_, "tmp")) {
  KD_CHECK(!final_.empty(), "checkpoint directory path is empty");
  std::error_code ec;
  fs::remove_all(staging_, ec);  // a leftover of an earlier crash of a process with our pid
  register_staged(staging_);
  fs::create_directories(staging_, ec);
  if (ec) unregister_staged(staging_);
  KD_CHECK(!ec, staging_, ": cannot create staging directory for ", final_, ": ", ec.message());
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);  // best effort: destructors must not throw
  unregister_staged(staging_);
}

std::string StagedDir::file(const std::string& name) const { return (fs::path(staging_) / name).string(); }

void StagedDir::commit() {
  KD_CHECK(!committed_, final_, ": staged directory committed twice");
  fsync_tree(staging_);
  std::error_code ec;
  auto hold = lock_staged();
  const bool exists = fs::exists(fs::symlink_status(final_, ec));
  if (!exists) {
    KD_CHECK(::rename(staging_.c_str(), final_.c_str()) == 0, "cannot rename ", staging_, " to ",
             final_, ": ", errno_text());
    committed_ = true;
    hold.unlock();
    unregister_staged(staging_);
    fsync_directory(parent_directory(final_));
    return;
  }
  KD_CHECK(fs::is_directory(fs::symlink_status(final_)), final_,
           ": exists and is not a directory; refusing to replace it");
  // RENAME_EXCHANGE swaps the two names in one step, so the final name always
  // refers to a complete directory; the old contents end up under the staging
  // name (still registered, so an interrupt removes them too) and are deleted afterwards.
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, final_.c_str(), RENAME_EXCHANGE) == 0) {
    committed_ = true;
    hold.unlock();
    fsync_directory(parent_directory(final_));
    fs::remove_all(staging_, ec);
    unregister_staged(staging_);
    return;
  }
  KD_CHECK(errno == EINVAL || errno == ENOSYS, "cannot exchange ", staging_, " with ", final_, ": ",
           errno_text());
  // Filesystem without RENAME_EXCHANGE: move the old one aside first. A crash
  // between the two renames leaves no final directory (never a partial one);
  // the previous version survives under "<final>.old.<pid>".
  const std::string old = sibling_staging_path(final_, "old");
  fs::remove_all(old, ec);
  register_staged(old);
  KD_CHECK(::rename(final_.c_str(), old.c_str()) == 0, "cannot move ", final_, " aside to ", old, ": ",
           errno_text());
  KD_CHECK(::rename(staging_.c_str(), final_.c_str()) == 0, "cannot rename ", staging_, " to ", final_, ": ",
           errno_text());
  committed_ = true;
  hold.unlock();
  unregister_staged(staging_);
  fsync_directory(parent_directory(final_));
  fs::remove_all(old, ec);
  unregister_staged(old);
}

void remove_dir_atomically(const std::string& dir) {
  const std::string aside = sibling_staging_path(strip_trailing_slashes(dir), "old");
  std::error_code ec;
  fs::remove_all(aside, ec);
  KD_CHECK(::rename(dir.c_str(), aside.c_str()) == 0, "cannot move ", dir, " aside to ", aside, " to delete it: ",
           errno_text());
  fs::remove_all(aside, ec);
}

}  // namespace kdtrain::io
