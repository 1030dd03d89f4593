// Shared by the fuzz targets: a private scratch directory for parsers that
// read files, and the rule every target enforces: a parser may only fail with
// kdtrain::Error (a message naming the problem). Any other exception escaping
// (nlohmann's type_error, std::out_of_range, ...), a crash, a sanitizer report,
// a hang or unbounded memory is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace kdtrain::fuzz {

// <TMPDIR>/kdtrain_fuzz_<pid>/, created once, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d =
        std::filesystem::temp_directory_path() / ("kdtrain_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return d;
  }();
  return dir;
}

// Writes the input to scratch_dir()/name and returns its path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// Runs the parser; kdtrain::Error is the expected way to refuse an input.
template <typename F>
void expect_only_kdtrain_errors(F parse) {
  try {
    parse();
  } catch (const kdtrain::Error&) {
  }
}

}  // namespace kdtrain::fuzz
