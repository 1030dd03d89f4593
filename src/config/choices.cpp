#include "config/choices.h"

#include "core/error.h"

namespace kdtrain {

void fail_unknown_choice(const char* what, const std::string& name,
                         const std::vector<std::string>& choices) {
  std::string list;
  for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
  fail("unknown ", what, " '", name, "' (choices: ", list, ")");
}

}  // namespace kdtrain
