# Writes OUTPUT: a C++ file defining kdtrain::io::hf_modeling_files() with the text
# of each of FILES (comma-separated names in SOURCE_DIR) as a raw string. Run by the
# build (cmake -P) whenever one of the Python files changes, so the binary always
# carries the modeling code of its own source tree (io/hf_modeling_sources.h).
set(delimiter "kdpy")
set(body "")
string(REPLACE "," ";" FILES "${FILES}")
foreach(name IN LISTS FILES)
  file(READ "${SOURCE_DIR}/${name}" text)
  string(FIND "${text}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${SOURCE_DIR}/${name}: contains the raw-string terminator )${delimiter}\"")
  endif()
  string(APPEND body "      {\"${name}\", R\"${delimiter}(${text})${delimiter}\"},\n")
endforeach()
set(cpp "// GENERATED at build time by cmake/embed_hf_sources.cmake from scripts/kdtrain_hf/.
#include \"io/hf_modeling_sources.h\"

namespace kdtrain::io {

const std::vector<EmbeddedFile>& hf_modeling_files() {
  static const std::vector<EmbeddedFile> files = {
${body}  };
  return files;
}

}  // namespace kdtrain::io
")
# Rewrite only on change, so an unchanged tree does not recompile the file.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL cpp)
  file(WRITE "${OUTPUT}" "${cpp}")
endif()
