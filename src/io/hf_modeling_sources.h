// The Python files `kdtrain export` writes next to non-baseline models so that
// transformers loads them with trust_remote_code (configuration_kdtrain.py,
// modeling_kdtrain.py). Their text is compiled in from scripts/kdtrain_hf/ by
// scripts/kdtrain_hf/embed_sources.py, so the binary works wherever it is
// installed; a test checks the embedded text still equals the files.
#pragma once
#include <vector>

namespace kdtrain::io {

struct EmbeddedFile {
  const char* name;  // file name, e.g. "modeling_kdtrain.py"
  const char* text;  // UTF-8 contents
};

const std::vector<EmbeddedFile>& hf_modeling_files();

}  // namespace kdtrain::io
