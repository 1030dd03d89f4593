#include "train/signals.h"

#include <csignal>

namespace kdtrain {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  std::signal(sig, SIG_DFL);
}
}  // namespace

void install_stop_handlers() {
  g_stop_signal = 0;
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal() { return g_stop_signal; }

}  // namespace kdtrain
