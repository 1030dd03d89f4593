// What may a command write, and where? One answer for every command that
// writes (docs/reliability.md, "The whole directory"):
//   - nothing but `train` writes anywhere inside a run directory (its own
//     files kdtrain.lock, config.json, metrics.jsonl, checkpoints/, or any
//     other path under it), and nothing at all inside a checkpoint, however
//     the path is spelled (links and `..` resolved as the OS resolves them);
//     results derived from a run go beside the run directory, never into it;
//   - `init`, `export`, `analyze` and `teacher-cache` write a new or empty
//     directory, or replace one that holds exactly what the same command
//     wrote there before, as its manifest (kdtrain_output.json) lists;
//     anything else is refused, --force or not, naming what is in the way;
//   - a file output (eval --out, dump --out, data write --out) is a regular
//     file, not a link, not one of the command's inputs.
// The checks only read; they run before anything is written.
#pragma once
#include <string>
#include <vector>

#include "io/output_manifest.h"

namespace kdtrain::io {

// What an existing directory holds, judged by its entries and its place.
enum class DirContent {
  absent,               // no such path
  empty,
  run,                  // a training run: kdtrain.lock, a checkpoints/ folder holding checkpoints,
                        // or config.json with metrics.jsonl
  run_checkpoints,      // a run's checkpoints/ folder (`latest` or step_<N> directories)
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
  std::string flag;                    // "--out", as the message names it
  // A command with a manifest of its own (teacher-cache: its cache manifest and
  // shards) names the files of its earlier output here, replaced by a rerun;
  // empty: the output manifest (kdtrain_output.json) of `command` recognises it.
  std::vector<std::string> own_files;
  bool force = false;                  // --force: replace the command's own earlier output
  std::string command;                 // "init": whose earlier output may be replaced
  // A rerun replaces the command's own earlier output without --force
  // (analyze, whose output is derived data).
  bool rerun_replaces = false;
};
// Throws naming the flag, the directory and what is in the way unless `spec` may write there.
void claim_output_dir(const std::string& dir, const OutputSpec& spec);

// `train`'s run directory: a new run only into a new or empty directory or a run
// directory without checkpoints; a resume into its own run directory, or
// (`branch`) into one without checkpoints or metrics records, so two runs are
// never merged. Never inside another run or a checkpoint; the run's own files
// (metrics.jsonl, config.json, kdtrain.lock, checkpoints) never links.
enum class RunClaim { new_run, resume_own, resume_branch };
void claim_run_dir(const std::string& dir, RunClaim claim, const std::string& resumed);

// A file output: a regular file or none, not a link, not inside a run or a
// checkpoint, and none of `inputs` (paths the command reads).
void claim_output_file(const std::string& path, const std::string& flag,
                       const std::vector<std::string>& inputs = {});

}  // namespace kdtrain::io
