// Checksums of the files of a checkpoint directory.
//
// <dir>/checksums.json, written after every other file of the checkpoint and
// before the directory is renamed into place (so before `latest` can name it):
//   {"format": "kdtrain.checksums/1", "algorithm": "xxh64",
//    "files": {"model.safetensors": {"bytes": 123456, "xxh64": "0123456789abcdef"}, ...}}
// xxh64 is xxHash64 with seed 0, the value `xxh64sum FILE` prints, so a
// checkpoint can be checked by hand. Loading verifies the files it reads, size
// first, then hash; a mismatch is refused naming the file. Files whose names
// end in .json or .safetensors that the manifest does not list (an optimizer
// shard copied in from another run) are refused too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kdtrain::io {

constexpr const char* kChecksumsFile = "checksums.json";

// xxHash64 (seed 0) of a whole file, streamed in 4 MiB reads.
uint64_t xxh64_file(const std::string& path);
std::string hex64(uint64_t value);  // 16 lowercase hex digits

// Hashes every regular file directly in `dir` (subdirectories are not part of
// a checkpoint) and writes checksums.json atomically.
void write_checksums(const std::string& dir);

bool has_checksums(const std::string& dir);

struct ChecksumReport {
  int64_t files = 0;
  int64_t bytes = 0;
};
// Verifies `names` (every listed file when empty); each must be listed, and no
// unlisted .json / .safetensors file may sit in `dir`. Throws naming the file.
ChecksumReport verify_checksums(const std::string& dir, const std::vector<std::string>& names = {});

}  // namespace kdtrain::io
