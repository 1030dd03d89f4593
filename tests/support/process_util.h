// Runs the kdtrain binary from tests: spawn with captured output, wait with a
// timeout, signal. POSIX only.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kdtrain::testing {

struct Process {
  pid_t pid = -1;
  std::string output_path;  // stdout and stderr together
};

inline Process spawn(const std::vector<std::string>& args, const std::string& output_path) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  Process p;
  p.output_path = output_path;
  if (posix_spawn(&p.pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) p.pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return p;
}

// Exit code, 128+signal when killed, -1 on timeout (the process is then killed).
inline int wait_for(const Process& p, double timeout_s = 120.0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs to completion; returns the exit code and fills `output`.
inline int run(const std::vector<std::string>& args, std::string* output, const std::string& log_path) {
  const Process p = spawn(args, log_path);
  if (p.pid < 0) return -1;
  const int code = wait_for(p);
  if (output) *output = read_file(log_path);
  return code;
}

}  // namespace kdtrain::testing
