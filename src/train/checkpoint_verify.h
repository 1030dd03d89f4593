// `kdtrain verify`: everything a load would check, on demand, without loading
// the model into a backend or the tensors into memory (files are mapped and
// scanned), so a 3B checkpoint verifies on a machine that could not train it.
//   training checkpoint  checksums.json (every file, size and xxh64), no
//                        unlisted file, trainer_state.json ranges and step =
//                        directory name, run_config.json, config.json, every
//                        weight tensor's shape and finite values, optimizer
//                        files tiling the arena with this step's finite moments
//   model checkpoint     (kdtrain init / export, Hugging Face) checksums when
//                        listed, config.json, weight shapes and finite values
//   run directory        every checkpoint under checkpoints/, and the one
//                        `--resume RUN` continues from: what `latest` names,
//                        or without `latest`, or with a newer complete one,
//                        the newest that verifies (said so). A step_<N> directory under
//                        checkpoints/ is a training checkpoint by its place, as
//                        for --resume: without trainer_state.json it fails.
//                        One the live run prunes while it is read is skipped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kdtrain {

struct VerifiedCheckpoint {
  std::string dir;
  bool training = false;     // trainer_state.json present
  bool checksummed = false;  // checksums.json present (and verified)
  int64_t step = 0;          // training checkpoints
  int64_t files = 0, bytes = 0, tensors = 0;
};

// Throws naming the file and what is wrong.
VerifiedCheckpoint verify_checkpoint(const std::string& dir);

struct RunVerification {
  std::vector<VerifiedCheckpoint> good;
  std::vector<std::pair<std::string, std::string>> bad;  // directory, error
  std::vector<std::string> pruned;  // deleted by the live run while being read (not failures)
  // What `--resume RUN` continues from ("" when that is no good checkpoint): what
  // `latest` names, or the newest checkpoint that verifies with `resume_note`
  // saying why (io/run_head.h, resume_point_of_run).
  std::string resume_from, resume_note;
  std::string resume_error;  // why there is none
};
RunVerification verify_run(const std::string& run_dir);

}  // namespace kdtrain
