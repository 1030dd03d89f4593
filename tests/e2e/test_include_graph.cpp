// The layers of docs/architecture.md, checked on the sources: every #include of
// a project header from src/ or kernels/ must point to the file's own layer or a
// lower one, so the rule cannot rot. Layers, lowest first (a directory may use
// its own and every lower rank; two directories of one rank stay apart):
//   0 core      errors, logging, the small things everything uses
//   1 config    the run configuration and its choices
//   1 kernels   the CUDA kernels, the tensor-core toolkit and its host emulator
//               (kernels/tc/sim): a leaf that sees only core
//   2 backend   Backend, the CPU backend (backend/cpu) and the CUDA backend
//               (backend/cuda) that launches the kernels
//   3 dist      communicators
//   4 model     the decoder written once against Backend, losses, parameter layout
//   5 io        file formats: safetensors, checkpoints, Hugging Face import/export
//   6 data      token shards, sampler, teacher cache
//   7 eval, train   evaluation and analysis; the trainer, optimizer, checkpoints
//   8 bench     kdtrain bench
//   9 cli       one file per command, main.cpp
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::map<std::string, int> kRank = {
    {"core", 0}, {"config", 1}, {"kernels", 1}, {"backend", 2}, {"dist", 3}, {"model", 4},
    {"io", 5},   {"data", 6},   {"eval", 7},    {"train", 7},   {"bench", 8},
    {"cli", 9}};

// The layer directory of a source file: src/<dir>/... or kernels/...
std::string layer_of(const fs::path& root, const fs::path& file) {
  const fs::path rel = fs::relative(file, root);
  auto it = rel.begin();
  const std::string top = it->string();
  if (top == "kernels") return "kernels";
  return (++it)->string();  // src/<dir>
}

// The layer a quoted include names: "model/model.h" -> model, "kernels/tc/sync.cuh"
// -> kernels; a bare name is a file beside the includer.
std::string layer_of_include(const fs::path& root, const fs::path& file, const std::string& inc) {
  if (fs::exists(file.parent_path() / inc)) return layer_of(root, file.parent_path() / inc);
  const size_t slash = inc.find('/');
  if (slash == std::string::npos) return "";
  const std::string dir = inc.substr(0, slash);
  return kRank.count(dir) ? dir : "";
}

// Known upward edges ("src/x/f.cpp -> y/g.h"), each named with its reason and
// listed in docs/architecture.md ("Known exceptions") until it is removed; any
// other upward include fails. None today: the strict JSON parser and the checked
// file reader the config readers use live in core/.
const std::set<std::string> kKnownUpward = {};

}  // namespace

TEST_CASE("architecture: includes point down the layers of docs/architecture.md", "[architecture]") {
  const fs::path root(KDTRAIN_SOURCE_DIR);
  const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<std::string> upward;
  int files = 0;
  for (const char* top : {"src", "kernels"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh"))
        continue;
      ++files;
      const std::string from = layer_of(root, entry.path());
      INFO(entry.path().string());
      REQUIRE(kRank.count(from) == 1);  // every directory has a rank above
      std::ifstream in(entry.path());
      std::string line;
      while (std::getline(in, line)) {
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        const std::string to = layer_of_include(root, entry.path(), m[1]);
        if (to.empty() || to == from) continue;
        const std::string edge = fs::relative(entry.path(), root).string() + " -> " + m[1].str();
        if (kRank.at(to) >= kRank.at(from) && !kKnownUpward.count(edge))
          upward.push_back(fs::relative(entry.path(), root).string() + " (" + from + ") includes \"" +
                           m[1].str() + "\" (" + to + ")");
      }
    }
  }
  REQUIRE(files > 100);  // the walk found the tree
  for (const std::string& u : upward) UNSCOPED_INFO(u);
  CHECK(upward.empty());
}
