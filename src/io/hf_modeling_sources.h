// The Python files `kdtrain export` writes next to non-baseline models so that
// transformers loads them with trust_remote_code (configuration_kdtrain.py,
// modeling_kdtrain.py and the variant table they import, variants.py). The build
// compiles their text in from scripts/kdtrain_hf/ (cmake/embed_hf_sources.cmake
// generates the definition), so the binary works wherever it is installed.
#pragma once
#include <vector>

namespace kdtrain::io {

struct EmbeddedFile {
  const char* name;  // file name, e.g. "modeling_kdtrain.py"
  const char* text;  // UTF-8 contents
};

const std::vector<EmbeddedFile>& hf_modeling_files();

}  // namespace kdtrain::io
