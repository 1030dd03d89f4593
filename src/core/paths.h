// One spelling per path. `runs/a/checkpoints/step_8/`, `./runs/a/checkpoints/step_8`
// and `runs//a/checkpoints/step_8` name one checkpoint; code that reads a
// path's last component (a step number, a run directory two levels up) must
// see the same one for all three. Every path a user gives (the CLI's path
// options) and every path the library is handed at an entry point goes
// through normal_path once.
#pragma once
#include <string>

namespace kdtrain {

// Normal (no `.`, no `x/..`, no repeated `/`), without a trailing `/` (except
// the root itself), and naming what the OS names: `x/..` is dropped lexically
// only when x is a directory, not a link; `lnk/../y` becomes the link target's
// parent followed by y (absolute), as open() would read it. "" stays "".
// Reads the file system only to ask whether a component before `..` is a link.
std::string normal_path(const std::string& path);

// True when a and b name the same existing file or directory (same device and
// inode), or, when either does not exist, have the same normal absolute spelling.
bool same_file(const std::string& a, const std::string& b);

}  // namespace kdtrain
