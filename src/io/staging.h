// What a command stages before it commits: a StagedDir's staging directory or
// an AtomicFileWriter's temporary, always a sibling of the final path.
//   - sibling_staging_path names it so that it is a valid file name even when the
//     final name is as long as the file system allows (255 bytes);
//   - while it exists it is registered, so that SIGINT / SIGTERM in a command
//     other than `train` (which checkpoints and exits instead) removes it
//     before the process ends: an interrupted command leaves nothing behind
//     (docs/reliability.md, "Signals").
#pragma once
#include <mutex>
#include <string>

namespace kdtrain::io {

// "<dir>/<name>.<tag>.<pid>", the name cut so the whole fits NAME_MAX.
std::string sibling_staging_path(const std::string& final_path, const char* tag);

// Registered paths are removed (recursively) when the process is interrupted.
void register_staged(const std::string& path);
void unregister_staged(const std::string& path);
// Held while a staged path is renamed into place, so an interrupt either
// removes it first or finds it committed, never half (recursive: a commit
// registers what it moves aside while it holds it).
std::unique_lock<std::recursive_mutex> lock_staged();

// Installs the SIGINT / SIGTERM handlers that remove what is registered and
// then end the process by the same signal (its exit status says so). main
// installs them for every command; `train` replaces them with its own. A rank
// started by an MPI launcher (under_launcher) waits for the launcher to kill it
// instead, so that no rank's end cuts another's removal short.
void remove_staged_on_interrupt(bool under_launcher);

}  // namespace kdtrain::io
