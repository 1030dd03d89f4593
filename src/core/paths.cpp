#include "core/paths.h"

#include <sys/stat.h>

#include <filesystem>

namespace kdtrain {

namespace fs = std::filesystem;

namespace {

bool is_link(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// `prefix/..` as the OS reads it: the parent of where prefix leads. Lexical
// when prefix's last component is a real directory (or nothing yet); through
// the link's target when it is a link, whose `..` is the target's parent.
fs::path up_from(const fs::path& prefix) {
  if (prefix.empty() || prefix.filename() == "..") return prefix / "..";
  if (prefix == prefix.root_path()) return prefix;  // "/.." is "/"
  if (is_link(prefix)) {
    std::error_code ec;
    const fs::path target = fs::canonical(prefix, ec);
    if (!ec) return target.parent_path();
  }
  return prefix.parent_path();
}

}  // namespace

std::string normal_path(const std::string& path) {
  if (path.empty()) return path;
  fs::path out;
  for (const fs::path& part : fs::path(path)) {
    const std::string name = part.string();
    if (name.empty() || name == ".") continue;
    if (name == "/" && out.empty()) {
      out = "/";
    } else if (name == "..") {
      out = up_from(out);
    } else {
      out /= part;
    }
  }
  std::string s = out.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s.empty() ? std::string(".") : s;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a, ea), ea);
  const fs::path pb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  return normal_path(pa.string()) == normal_path(pb.string());
}

}  // namespace kdtrain
