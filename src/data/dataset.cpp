#include "data/dataset.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/paths.h"
#include "io/file_util.h"

namespace kdtrain::data {

namespace {

// glob()'s error callback has no user pointer: the first failing directory and
// its errno go here (one glob at a time per thread).
thread_local std::string glob_error_path;
thread_local int glob_error_errno = 0;

int record_glob_error(const char* path, int error) {
  if (glob_error_path.empty()) {
    glob_error_path = path;
    glob_error_errno = error;
  }
  return 1;  // stop: an unreadable directory must not silently shrink the data set
}

// Why `pattern` matched nothing or failed, naming the directory at fault.
std::string explain_glob_failure(const std::string& pattern, int rc) {
  // The directory part before the first wildcard is what must exist.
  const size_t wildcard = pattern.find_first_of("*?[");
  const size_t slash = pattern.rfind('/', wildcard == std::string::npos ? std::string::npos : wildcard);
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : pattern.substr(0, slash);
  const std::string why = not_a_regular_file(dir);
  if (why == "no such file or directory") return "directory " + dir + " does not exist";
  if (!why.empty() && why.rfind("is a directory", 0) != 0) return dir + " " + why;
  if (why.empty()) return dir + " is a file, not a directory";
  if (rc == GLOB_ABORTED && !glob_error_path.empty())
    return "cannot read directory " + glob_error_path + ": " + std::strerror(glob_error_errno);
  if (rc == GLOB_NOSPACE) return "out of memory while expanding it";
  return "matches no files";
}

}  // namespace

std::vector<std::string> expand_shard_patterns(const std::vector<std::string>& patterns) {
  KD_CHECK(!patterns.empty(), "no data shards given (empty list of paths / globs)");
  std::vector<std::string> paths;
  for (const std::string& pattern : patterns) {
    // A path that names an existing file is that file, even when it holds glob
    // characters: `shards/run[1].bin` is not the pattern matching `run1.bin`.
    struct stat st {};
    if (::stat(pattern.c_str(), &st) == 0) {
      paths.push_back(normal_path(pattern));
      continue;
    }
    glob_t g{};
    // GLOB_NOCHECK is not used: a pattern (or plain path) matching nothing must
    // be an error, not a literal filename that fails later with a vaguer message.
    glob_error_path.clear();
    int rc = ::glob(pattern.c_str(), GLOB_ERR, &record_glob_error, &g);
    if (rc != 0 || g.gl_pathc == 0) {
      ::globfree(&g);
      const std::string why = explain_glob_failure(pattern, rc);
      if (why == "matches no files") fail("data pattern '", pattern, "' matches no files");
      fail("data pattern '", pattern, "': ", why);
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.push_back(normal_path(g.gl_pathv[i]));
    ::globfree(&g);
  }
  // Each file once, however many patterns or spellings (`train.bin`, `./train.bin`,
  // a link) reach it: the same file listed twice would silently double its data.
  std::sort(paths.begin(), paths.end());
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<std::string> unique;
  for (const std::string& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !seen.insert({st.st_dev, st.st_ino}).second) continue;
    unique.push_back(path);
  }
  return unique;
}

TokenDataset::TokenDataset(const std::vector<std::string>& patterns, int64_t seq_len,
                           int64_t vocab_size)
    : seq_len_(seq_len) {
  KD_CHECK(seq_len > 0, "data: seq_len must be positive, got ", seq_len);
  first_window_.push_back(0);
  for (const std::string& path : expand_shard_patterns(patterns)) {
    TokenShard shard(path);
    if (vocab_size > 0) shard.validate_vocab(vocab_size);
    KD_CHECK(shard.size() >= seq_len + 1, path, ": token shard has ", shard.size(),
             " tokens, fewer than one window of seq_len + 1 = ", seq_len + 1);
    // Window k covers [k*T, k*T + T]; the last one must end before the shard does.
    const int64_t windows = (shard.size() - 1) / seq_len;
    first_window_.push_back(first_window_.back() + windows);
    shards_.push_back(std::move(shard));
  }
  total_windows_ = first_window_.back();
}

TokenDataset::WindowLocation TokenDataset::locate(int64_t window) const {
  KD_CHECK(window >= 0 && window < total_windows_, "data: window ", window, " out of range [0, ",
           total_windows_, ")");
  // first_window_ is increasing; the shard is the last entry <= window.
  auto it = std::upper_bound(first_window_.begin(), first_window_.end(), window);
  WindowLocation loc;
  loc.shard = (it - first_window_.begin()) - 1;
  loc.start = (window - first_window_[loc.shard]) * seq_len_;
  return loc;
}

void TokenDataset::read_window(int64_t window, int32_t* out) const {
  WindowLocation loc = locate(window);
  shards_[loc.shard].copy_tokens(loc.start, seq_len_ + 1, out);
}

void TokenDataset::fill_batch(const std::vector<int64_t>& windows, int32_t* inputs,
                              int32_t* targets) const {
  std::vector<int32_t> buffer(seq_len_ + 1);
  for (size_t b = 0; b < windows.size(); ++b) {
    read_window(windows[b], buffer.data());
    std::copy(buffer.begin(), buffer.end() - 1, inputs + b * seq_len_);
    std::copy(buffer.begin() + 1, buffer.end(), targets + b * seq_len_);
  }
}

uint64_t TokenDataset::fingerprint() const {
  std::vector<uint64_t> words;
  words.push_back(static_cast<uint64_t>(seq_len_));
  for (const TokenShard& s : shards_) words.push_back(s.fingerprint());
  return token_fingerprint(reinterpret_cast<const uint8_t*>(words.data()), words.size() * 8, 8);
}

}  // namespace kdtrain::data
