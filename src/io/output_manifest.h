// The manifest every directory-writing command but `train` leaves in its
// output (kdtrain_output.json), naming the command and every file it wrote:
// how a rerun recognises its own earlier output, the only directory it may
// replace (io/output_dir.h).
//   {"format": "kdtrain.output/1", "command": "init", "files": ["config.json", ...]}
#pragma once
#include <string>
#include <vector>

namespace kdtrain::io {

inline constexpr const char* kOutputManifest = "kdtrain_output.json";

// Writes the manifest of `command` ("init") into `dir`, listing the regular
// files there now and `written_after` (files the command writes after the
// manifest: a model's checksums.json, which lists the manifest in turn); call
// it last, on the staging directory.
void write_output_manifest(const std::string& dir, const std::string& command,
                           const std::vector<std::string>& written_after = {});

// "" when `dir` holds only regular files an earlier `kdtrain <command>` wrote
// there, as its manifest lists them; else what is in the way, for a message.
std::string not_own_output(const std::string& dir, const std::string& command);

}  // namespace kdtrain::io
