// kdtrain: the command-line entry point. Errors reach stderr with exit code 1.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/suggest.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "io/file_util.h"
#include "io/staging.h"

int main(int argc, char** argv) {
  // A console write to a pipe whose reader is gone (`| head`, a restarted log
  // shipper) fails with EPIPE and is handled as any failed write (the run
  // checkpoints and says so) instead of killing the process silently.
  std::signal(SIGPIPE, SIG_IGN);
  kdtrain::io::install_mapped_file_fault_handler();
  // An interrupted command removes what it staged (train replaces these
  // handlers: it checkpoints and exits instead).
  kdtrain::io::remove_staged_on_interrupt(kdtrain::dist::launched_by_mpi());
  CLI::App app{"kdtrain: pretrain LLaMA/Qwen-style students by knowledge distillation"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kdtrain 0.1.0");
  kdtrain::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A misspelled command or flag gets the nearest known spelling.
    const bool help = e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success);
    const std::string hint =
        help ? "" : kdtrain::cli::explain_unknown_argument(app, std::vector<std::string>(argv + 1, argv + argc));
    if (!hint.empty()) {
      std::fprintf(stderr, "kdtrain: error: %s\n", hint.c_str());
      return e.get_exit_code();
    }
    return app.exit(e);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kdtrain: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kdtrain: error: %s\n", e.what());
    return 1;
  }
  // Output that never reached its file is a failure (`kdtrain info > f` on a full disk).
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "kdtrain: error: standard output: write failed: %s\n", std::strerror(errno));
    return 1;
  }
  return 0;
}
