#include "io/staging.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

namespace kdtrain::io {

namespace fs = std::filesystem;

namespace {

std::recursive_mutex& registry_mutex() {
  static std::recursive_mutex m;
  return m;
}
std::set<std::string>& registry() {
  static std::set<std::string> paths;
  return paths;
}

// The handler only writes the signal number to a pipe (async-signal-safe); a
// thread of ours does the removal, which needs the heap and the file system.
int g_wake[2] = {-1, -1};
bool g_outlive_siblings = false;

extern "C" void on_interrupt(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (::write(g_wake[1], &byte, 1) != 1) ::_exit(128 + sig);
}

void remove_registered_then_die() {
  unsigned char sig = 0;
  while (::read(g_wake[0], &sig, 1) != 1) {
  }
  std::lock_guard<std::recursive_mutex> hold(registry_mutex());  // never released: the process ends here
  for (const std::string& path : registry()) {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  // Open MPI's mpirun passes the signal to every rank, then kills every rank still
  // running the moment one ends (and all of them a second later): a rank that ended
  // first would cut its siblings' removal short. So a rank waits (3 s at most) to be killed.
  if (g_outlive_siblings) std::this_thread::sleep_for(std::chrono::seconds(3));
  ::signal(sig, SIG_DFL);
  ::kill(::getpid(), sig);
  ::_exit(128 + sig);  // not reached unless the signal is blocked
}

}  // namespace

std::string sibling_staging_path(const std::string& final_path, const char* tag) {
  const fs::path p(final_path);
  const std::string suffix = std::string(".") + tag + "." + std::to_string(::getpid());
  std::string name = p.filename().string();
  if (name.size() + suffix.size() > NAME_MAX) name.resize(NAME_MAX - suffix.size());
  return (p.parent_path() / (name + suffix)).string();
}

void register_staged(const std::string& path) {
  std::lock_guard<std::recursive_mutex> hold(registry_mutex());
  registry().insert(path);
}

void unregister_staged(const std::string& path) {
  std::lock_guard<std::recursive_mutex> hold(registry_mutex());
  registry().erase(path);
}

std::unique_lock<std::recursive_mutex> lock_staged() { return std::unique_lock<std::recursive_mutex>(registry_mutex()); }

void remove_staged_on_interrupt(bool under_launcher) {
  if (g_wake[0] >= 0 || ::pipe(g_wake) != 0) return;
  g_outlive_siblings = under_launcher;
  std::thread(remove_registered_then_die).detach();
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESETHAND;  // a second signal ends the process at once
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

}  // namespace kdtrain::io
