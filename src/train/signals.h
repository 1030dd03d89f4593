// SIGINT / SIGTERM ask the training loop to finish the current step, write a
// checkpoint and exit 0. A second signal restores the default action, so a
// user can still kill a stuck run with another Ctrl-C.
#pragma once

namespace kdtrain {

void install_stop_handlers();
bool stop_requested();
int stop_signal();  // the signal number that asked to stop, 0 if none

}  // namespace kdtrain
