#include "cli/commands.h"
#include "core/error.h"

namespace kdtrain::cli {

void register_dump(CLI::App& app) {
  auto* command = app.add_subcommand("dump", "(not yet implemented)");
  command->callback([] { fail("kdtrain dump: not implemented yet"); });
}

}  // namespace kdtrain::cli
