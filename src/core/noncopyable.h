// A base for classes that own a resource (a descriptor, a directory being
// staged, a lock): copying one would release or commit it twice.
#pragma once

namespace kdtrain {

class NonCopyable {
 public:
  NonCopyable(const NonCopyable&) = delete;
  NonCopyable& operator=(const NonCopyable&) = delete;

 protected:
  NonCopyable() = default;
  ~NonCopyable() = default;
};

}  // namespace kdtrain
