// doctest driver for tests whose ranks are processes started here, with no MPI: run as
// `test_shm_store` (TCOLL_TEST_NP=P in the environment, default 2), it makes a scratch
// directory, starts P copies of itself (rank r gets TCOLL_TEST_RANK=r and the directory in
// TCOLL_TEST_STORE) and waits for them at most TCOLL_TEST_DEADLINE_S seconds (default 240;
// then it kills them: a hang fails the test instead of blocking CI). Every rank runs every
// test case in the same order (they meet through a tcoll::file_store in the directory); the
// exit code is the worst over ranks. Rank 0 prints its report, other ranks only failures.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../common/doctest_ranks.hpp"
#include "process_team.hpp"

extern char** environ;

namespace {

int launch(int argc, char** argv) {
  const char* np_text = std::getenv("TCOLL_TEST_NP");
  const int P = np_text ? std::atoi(np_text) : 2;
  const char* deadline_text = std::getenv("TCOLL_TEST_DEADLINE_S");
  const int deadline_s = deadline_text ? std::atoi(deadline_text) : 240;
  char pattern[] = "/tmp/tcoll-test-store-XXXXXX";
  if (!mkdtemp(pattern)) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::string directory = pattern;
  std::vector<pid_t> children;
  for (int r = 0; r < P; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 2;
    }
    if (pid == 0) {
      setenv("TCOLL_TEST_RANK", std::to_string(r).c_str(), 1);
      setenv("TCOLL_TEST_NP", std::to_string(P).c_str(), 1);
      setenv("TCOLL_TEST_STORE", directory.c_str(), 1);
      std::vector<char*> args(argv, argv + argc);
      args.push_back(nullptr);
      execv("/proc/self/exe", args.data());
      std::perror("execv");
      _exit(127);
    }
    children.push_back(pid);
  }
  int worst = 0;
  std::size_t finished = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
  std::vector<bool> reaped(children.size(), false);
  while (finished < children.size()) {
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (reaped[i]) continue;
      int status = 0;
      if (waitpid(children[i], &status, WNOHANG) == children[i]) {
        reaped[i] = true, ++finished;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0) std::fprintf(stderr, "rank %zu exited with %d\n", i, code);
        worst = std::max(worst, code);
      }
    }
    if (finished < children.size() && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "process team: deadline of %d s passed, killing the ranks\n",
                   deadline_s);
      for (std::size_t i = 0; i < children.size(); ++i)
        if (!reaped[i]) kill(children[i], SIGKILL);
      worst = std::max(worst, 124);
      for (std::size_t i = 0; i < children.size(); ++i)
        if (!reaped[i]) waitpid(children[i], nullptr, 0), reaped[i] = true, ++finished;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::error_code ec;
  std::filesystem::remove_all(directory, ec);
  return worst;
}

} // namespace

int main(int argc, char** argv) {
  if (!std::getenv("TCOLL_TEST_RANK")) return launch(argc, argv);
  return tcoll_test::run_doctest_as_rank(argc, argv, tcoll::testing::process_team::rank());
}
