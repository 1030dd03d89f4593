// What the file-level tests spell alike: the filesystem alias, Catch's Contains
// matcher, and the message of an error a call is expected to raise.
#pragma once
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace kdtrain::testing {

// The message of the kdtrain::Error that `action` throws; "" when it throws none.
template <typename Action>
std::string error_message(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kdtrain::testing
