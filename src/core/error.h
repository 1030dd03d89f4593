// Errors that reach the user. Every message names what was wrong and where
// (a file, a config key path, a tensor name), so a failing run can be fixed
// without a debugger.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kdtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename First, typename... Rest>
void append_all(std::ostringstream& out, const First& first, const Rest&... rest) {
  out << first;
  append_all(out, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<< and throws kdtrain::Error.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream out;
  detail::append_all(out, args...);
  throw Error(out.str());
}

}  // namespace kdtrain

// Checks an invariant that input can violate; the message parts follow the condition.
#define KD_CHECK(cond, ...)            \
  do {                                 \
    if (!(cond)) ::kdtrain::fail(__VA_ARGS__); \
  } while (0)
