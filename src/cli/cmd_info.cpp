#include "cli/commands.h"
#include "core/error.h"

namespace kdtrain::cli {

void register_info(CLI::App& app) {
  auto* command = app.add_subcommand("info", "(not yet implemented)");
  command->callback([] { fail("kdtrain info: not implemented yet"); });
}

}  // namespace kdtrain::cli
