#include "io/checksums.h"

#define XXH_INLINE_ALL  // header-only: nothing to link
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file_util.h"

namespace kdtrain::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "kdtrain.checksums/1";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Listed {
  int64_t bytes = 0;
  std::string xxh64;
};

// The manifest's file table, every field checked.
std::map<std::string, Listed> read_manifest(const std::string& path) {
  const nlohmann::json doc = read_json_file(path);
  KD_CHECK(doc.is_object() && doc.value("format", "") == kFormat, path, ": not a kdtrain checksum manifest (",
           kFormat, ")");
  KD_CHECK(doc.value("algorithm", "") == "xxh64", path, ": unsupported checksum algorithm (expected xxh64)");
  KD_CHECK(doc.contains("files") && doc["files"].is_object(), path, ": 'files' must be an object");
  std::map<std::string, Listed> files;
  for (auto it = doc["files"].begin(); it != doc["files"].end(); ++it) {
    const nlohmann::json& f = it.value();
    KD_CHECK(it.key().find('/') == std::string::npos && it.key() != "." && it.key() != ".." && !it.key().empty(),
             path, ": lists '", it.key(), "', which is not a file name in the checkpoint directory");
    KD_CHECK(f.is_object() && f.contains("bytes") && f["bytes"].is_number_unsigned() && f.contains("xxh64") &&
                 f["xxh64"].is_string() && f["xxh64"].get<std::string>().size() == 16,
             path, ": entry '", it.key(), "' must be {\"bytes\": <n>, \"xxh64\": \"<16 hex digits>\"}");
    files[it.key()] = Listed{f["bytes"].get<int64_t>(), f["xxh64"].get<std::string>()};
  }
  return files;
}

}  // namespace

uint64_t xxh64_file(const std::string& path) {
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(), &XXH64_freeState);
  KD_CHECK(state != nullptr && XXH64_reset(state.get(), 0) == XXH_OK, "xxh64: out of memory");
  read_chunks(path, SIZE_MAX, [&](const char* data, size_t n) { XXH64_update(state.get(), data, n); });
  return XXH64_digest(state.get());
}

std::string hex64(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

void write_checksums(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == kChecksumsFile) continue;
    files[name] = {{"bytes", e.file_size()}, {"xxh64", hex64(xxh64_file(e.path().string()))}};
  }
  const nlohmann::json doc = {{"format", kFormat}, {"algorithm", "xxh64"}, {"files", files}};
  const std::string text = doc.dump(2) + "\n";
  AtomicFileWriter out((fs::path(dir) / kChecksumsFile).string());
  out.write(text.data(), text.size());
  out.commit();
}

bool has_checksums(const std::string& dir) { return fs::exists(fs::path(dir) / kChecksumsFile); }

ChecksumReport verify_checksums(const std::string& dir, const std::vector<std::string>& names) {
  const std::string manifest_path = (fs::path(dir) / kChecksumsFile).string();
  KD_CHECK(has_checksums(dir), dir, ": no ", kChecksumsFile,
           "; a checkpoint cannot be verified without it (it is written with every checkpoint)");
  const std::map<std::string, Listed> listed = read_manifest(manifest_path);
  std::vector<std::string> check = names;
  if (check.empty())
    for (const auto& [name, _] : listed) check.push_back(name);
  // Cheap, so always: a file a loader might pick up must be one the checkpoint wrote.
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == kChecksumsFile || listed.count(name)) continue;
    KD_CHECK(!(ends_with(name, ".json") || ends_with(name, ".safetensors")), e.path().string(),
             ": not part of the checkpoint (", manifest_path, " does not list it); remove it");
  }
  ChecksumReport report;
  for (const std::string& name : check) {
    const std::string path = (fs::path(dir) / name).string();
    const auto it = listed.find(name);
    KD_CHECK(it != listed.end(), path, ": not listed in ", manifest_path, "; the checkpoint was altered");
    const std::string why = not_a_regular_file(path);
    KD_CHECK(why.empty(), path, ": ", why, " (", manifest_path, " lists it)");
    const int64_t bytes = static_cast<int64_t>(fs::file_size(path));
    KD_CHECK(bytes == it->second.bytes, path, ": ", bytes, " bytes but ", kChecksumsFile, " records ",
             it->second.bytes, ": the file is truncated or was replaced");
    const std::string actual = hex64(xxh64_file(path));
    KD_CHECK(actual == it->second.xxh64, path, ": checksum mismatch (xxh64 ", actual, ", ", kChecksumsFile,
             " records ", it->second.xxh64, "): the file is corrupt or was replaced");
    report.files += 1;
    report.bytes += bytes;
  }
  return report;
}

}  // namespace kdtrain::io
