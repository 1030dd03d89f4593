#include "cli/commands.h"

namespace kdtrain::cli {

void register_commands(CLI::App& app, TrainObserver* observer) {
  register_info(app);
  register_init(app);
  register_dump(app);
  register_train(app, observer);
  register_data(app);
  register_teacher_cache(app);
  register_eval(app);
  register_analyze(app);
  register_export(app);
  register_bench(app);
  register_config(app);
  register_verify(app);
}

}  // namespace kdtrain::cli
