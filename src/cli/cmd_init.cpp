#include "cli/commands.h"
#include "core/error.h"

namespace kdtrain::cli {

void register_init(CLI::App& app) {
  auto* command = app.add_subcommand("init", "(not yet implemented)");
  command->callback([] { fail("kdtrain init: not implemented yet"); });
}

}  // namespace kdtrain::cli
