// Starting one rank: what the parent prepares (the program's path, searched in PATH as
// execvp() would; argv, envp and the CPU mask as plain arrays) and what the child does between
// fork() and exec. The parent has the rendezvous thread running, so the child calls only
// async-signal-safe functions: it joins the ranks' process group, asks for SIGTERM when sqzrun
// dies (PR_SET_PDEATHSIG), binds, places its stdio, restores the signal mask and fd limit, and
// execs. It reports a failed bind or exec on a close-on-exec pipe; EOF there means the exec
// worked.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"

namespace squeeze::launcher {

// The file execve() should run for `name`, searched in PATH like execvp(). Returns nullopt and
// sets *error otherwise.
std::optional<std::string> resolveProgram(const std::string& name, std::string* error);

// NULL-terminated char* arrays over strings the caller keeps alive.
std::vector<char*> cArray(std::vector<std::string>& strings);

// What the child writes to reportFd before it gives up on a step.
enum class ChildStage : int32_t { kBind = 1, kExec = 2 };
struct ChildReport {
  ChildStage stage;
  int32_t err;
};

struct ChildPlan {
  const char* path;
  char* const* argv;
  char* const* shArgv;  // /bin/sh PATH ARGS..., for a script without #! (as execvp does)
  char* const* envp;
  pid_t pgid;  // 0: lead a new group
  pid_t parent;
  const sigset_t* mask;
  const rlimit* nofile;
  const CpuMask* cpus;  // nullptr: do not bind
  int stdinFd;          // -1: inherit
  int outFd, errFd;     // -1: inherit
  int reportFd;         // close-on-exec; EOF at the parent means the exec worked
};

// The child's side of fork(): never returns (exec, or _exit(kExitCannotExec)).
[[noreturn]] void runChild(const ChildPlan& p);

}  // namespace squeeze::launcher
