// Atomic directory writes, for checkpoints: files are written into a staging
// directory next to the target, then commit() makes them durable and swaps the
// staging directory in under the final name. A crash at any point leaves either
// the old directory (or none) or the complete new one under the final name —
// never a partial directory that would load.
//
//   io::StagedDir stage("runs/x/step_000100");
//   write_something(stage.file("model.safetensors"));
//   write_other(stage.file("optimizer.bin"));
//   stage.commit();
#pragma once
#include <string>

#include "core/noncopyable.h"

namespace kdtrain::io {

class StagedDir : NonCopyable {
 public:
  // Creates "<final_dir>.tmp.<pid>" (removing a stale one of this pid first).
  explicit StagedDir(const std::string& final_dir);
  // Removes the staging directory when commit() was not reached.
  ~StagedDir();

  const std::string& staging_path() const { return staging_; }
  const std::string& final_path() const { return final_; }
  // Path of `name` inside the staging directory (sub-directories are the caller's).
  std::string file(const std::string& name) const;

  // fsyncs every file and directory under the staging directory, renames it to
  // the final name (atomically exchanging with an existing directory, which is
  // then deleted), and fsyncs the parent directory.
  void commit();
  bool committed() const { return committed_; }

 private:
  std::string final_;
  std::string staging_;
  bool committed_ = false;
};

// Deletes a directory so that a reader (`kdtrain verify` on a live run) sees it
// whole or not at all: it is renamed aside to "<dir>.old.<pid>" in one step,
// then deleted. A crash in between leaves only the moved-aside name, which is
// never read as a checkpoint and is removed by the next save.
void remove_dir_atomically(const std::string& dir);

}  // namespace kdtrain::io
