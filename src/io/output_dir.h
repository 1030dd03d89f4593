// What may a command write into this directory? One answer for every command
// that writes a directory (docs/reliability.md, "The whole directory"):
//   - `train` writes only into a new or empty directory or a run directory of
//     its own (a resume into another --run-dir only into one without history);
//   - `init`, `export`, `analyze` and `teacher-cache` write into a new or empty
//     directory, or one that holds only their own output; anything else needs
//     --force; and never, --force or not, into a training run or a checkpoint,
//     so no command can replace a teacher, a run or its checkpoints.
// The check only reads; it runs before anything is written.
#pragma once
#include <string>
#include <vector>

namespace kdtrain::io {

// What an existing directory holds, judged by the names of its entries.
enum class DirContent {
  absent,               // no such path
  empty,
  run,                  // a training run directory (lock, checkpoints/ or metrics.jsonl)
  training_checkpoint,  // trainer_state.json / run_config.json, or step_<N> under checkpoints/
  model,                // config.json with model.safetensors or its index (a model checkpoint)
  other,                // anything else, a file included
};
DirContent dir_content(const std::string& dir);
// "a training run directory (kdtrain.lock, checkpoints, metrics.jsonl)": the kind and up to
// four of its entries, for messages.
std::string describe_dir(const std::string& dir);

// What a non-training command writes, for claim_output_dir.
struct OutputSpec {
  std::string flag;                     // "--out", as the message names it
  std::vector<std::string> own_files;   // a directory holding only these is the command's own output
  bool force = false;                   // --force: replace or add to a directory of other content
};
// Throws naming the flag, the directory and what it holds unless `spec` may write there.
void claim_output_dir(const std::string& dir, const OutputSpec& spec);

// `train`'s run directory. A new run may write into a run directory (one
// without checkpoints is checked by the caller); a resume whose --run-dir is
// not the checkpoint's own run (`branch`) only into one that holds no
// checkpoints and no metrics records, so two runs are never merged.
void claim_run_dir(const std::string& dir, bool branch, const std::string& resumed);

// A file output (dump --out, eval --out, data write --out): never inside a checkpoint.
void claim_output_file(const std::string& path, const std::string& flag);

}  // namespace kdtrain::io
