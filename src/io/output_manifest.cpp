#include "io/output_manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/file_util.h"

namespace kdtrain::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestFormat = "kdtrain.output/1";

bool is_regular_not_link(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

void write_output_manifest(const std::string& dir, const std::string& command,
                           const std::vector<std::string>& written_after) {
  std::vector<std::string> files = written_after;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name != kOutputManifest) files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  const nlohmann::json doc = {{"format", kManifestFormat}, {"command", command}, {"files", files}};
  const std::string text = doc.dump(2) + "\n";
  AtomicFileWriter out((fs::path(dir) / kOutputManifest).string());
  out.write(text.data(), text.size());
  out.commit();
}

std::string not_own_output(const std::string& dir_path, const std::string& command) {
  const fs::path dir(dir_path);
  const fs::path manifest = dir / kOutputManifest;
  std::set<std::string> listed{kOutputManifest};
  std::string by;
  try {
    const nlohmann::json doc = read_json_file(manifest.string());
    if (!doc.is_object() || doc.value("format", "") != kManifestFormat || !doc["files"].is_array())
      return manifest.string() + " is not a kdtrain output manifest";
    by = doc.value("command", "");
    for (const nlohmann::json& f : doc["files"]) listed.insert(f.get<std::string>());
  } catch (const std::exception&) {  // unreadable, not JSON, or fields of the wrong type
    return "holds no readable " + std::string(kOutputManifest) + ", so it is no output of `kdtrain " + command + "`";
  }
  if (by != command) return "holds the output of `kdtrain " + by + "`, not of `kdtrain " + command + "`";
  std::string extra;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!listed.count(name) || !is_regular_not_link(it->path())) extra += (extra.empty() ? "" : ", ") + name;
  }
  return extra.empty() ? "" : "holds what the earlier `kdtrain " + command + "` did not write there: " + extra;
}

}  // namespace kdtrain::io
