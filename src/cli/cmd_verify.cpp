// kdtrain verify CHECKPOINT_OR_RUN_OR_CACHE: checks a checkpoint (or every checkpoint
// of a run) as a load would, on demand (train/checkpoint_verify.h), or every shard
// of a teacher cache (cli/teacher_cache_verify.h). Exit 0 when
// everything verifies, 1 otherwise, each problem named on stderr.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/teacher_cache_verify.h"
#include "core/error.h"
#include "train/checkpoint_verify.h"

namespace kdtrain::cli {

namespace {

void print_verified(const VerifiedCheckpoint& v) {
  if (v.training)
    std::printf("ok    %s: training checkpoint, step %lld, %lld files (%.1f MiB) match checksums.json, "
                "%lld tensors finite\n",
                v.dir.c_str(), static_cast<long long>(v.step), static_cast<long long>(v.files),
                v.bytes / (1024.0 * 1024.0), static_cast<long long>(v.tensors));
  else
    std::printf("ok    %s: model checkpoint, %s, %lld tensors finite\n", v.dir.c_str(),
                v.checksummed ? "files match checksums.json" : "no checksums.json (not written by kdtrain)",
                static_cast<long long>(v.tensors));
}

int run_verify(const std::string& path) {
  namespace fs = std::filesystem;
  if (is_teacher_cache_dir(path)) {
    verify_teacher_cache(path);
    return 0;
  }
  if (!fs::is_directory(fs::path(path) / "checkpoints")) {
    print_verified(verify_checkpoint(path));
    return 0;
  }
  const RunVerification r = verify_run(path);
  for (const VerifiedCheckpoint& v : r.good) print_verified(v);
  for (const std::string& dir : r.pruned) std::printf("note  %s: deleted by the running training (pruned) while verifying\n", dir.c_str());
  for (const auto& [dir, error] : r.bad) std::fprintf(stderr, "FAIL  %s: %s\n", dir.c_str(), error.c_str());
  // A run stopped before `latest` moved is no failure: --resume continues from its newest checkpoint.
  if (!r.resume_note.empty())
    std::printf("note  %s\nresume: %s (what `kdtrain train --resume %s` continues from)\n", r.resume_note.c_str(),
                r.resume_from.c_str(), path.c_str());
  else if (!r.resume_from.empty())
    std::printf("latest: %s\n", r.resume_from.c_str());
  else
    std::fprintf(stderr, "FAIL  latest: %s\n", r.resume_error.c_str());
  KD_CHECK(r.bad.empty() && !r.resume_from.empty(), path, ": ", r.bad.size(), " of ", r.bad.size() + r.good.size(),
           " checkpoints failed verification",
           r.resume_from.empty() ? " and no good checkpoint is there to resume from" : "");
  return 0;
}

}  // namespace

void register_verify(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto* command = app.add_subcommand(
      "verify", "Check a checkpoint, every checkpoint of a run directory, or a teacher cache: checksums, state, values");
  command->add_option("path", *path, "checkpoint, run or teacher cache directory")->required()->transform(normal_path_option());
  command->callback([path] { run_verify(*path); });
}

}  // namespace kdtrain::cli
