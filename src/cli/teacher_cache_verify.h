// `kdtrain verify CACHE_DIR`: every shard of a teacher cache read whole, its
// checksum compared and every window's rows decoded and validated
// (data/teacher_cache.h). Prints one line per shard; throws naming the first
// bad shard and window after the good ones are listed.
#pragma once
#include <string>

namespace kdtrain::cli {

// True when `dir` holds a teacher cache (a manifest, or a version-1 file).
bool is_teacher_cache_dir(const std::string& dir);
void verify_teacher_cache(const std::string& dir);

}  // namespace kdtrain::cli
