#include "core/paths.h"

#include <sys/stat.h>

#include <filesystem>

namespace kdtrain {

namespace fs = std::filesystem;

std::string normal_path(const std::string& path) {
  if (path.empty()) return path;
  std::string s = fs::path(path).lexically_normal().string();
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
