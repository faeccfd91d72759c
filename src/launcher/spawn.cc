// Starting one rank: the program's path, the exec arrays, and the child between fork() and exec
// (see spawn.h).
#include "spawn.h"

#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/strings.h"
#include "exit_status.h"

namespace squeeze::launcher {

std::optional<std::string> resolveProgram(const std::string& name, std::string* error) {
  auto check = [](const std::string& path) -> int {  // 0 or an errno
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (::access(path.c_str(), X_OK) != 0) return errno;
    return 0;
  };
  if (name.find('/') != std::string::npos) {
    int err = check(name);
    if (err == 0) return name;
    *error = std::strerror(err);
    return std::nullopt;
  }
  const char* pathEnv = std::getenv("PATH");
  std::string path = pathEnv ? pathEnv : "/bin:/usr/bin";
  int firstErr = ENOENT;
  for (const std::string& dir : split(path, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    int err = check(candidate);
    if (err == 0) return candidate;
    if (err != ENOENT && err != ENOTDIR && firstErr == ENOENT) firstErr = err;
  }
  *error = firstErr == ENOENT ? std::string("command not found (searched PATH)")
                              : std::string(std::strerror(firstErr));
  return std::nullopt;
}

// NULL-terminated char* arrays over strings the caller keeps alive.
std::vector<char*> cArray(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

namespace {

void report(int fd, ChildStage stage, int err) {
  ChildReport r{stage, err};
  ssize_t ignored = ::write(fd, &r, sizeof r);
  (void)ignored;
}

}  // namespace

[[noreturn]] void runChild(const ChildPlan& p) {
  ::setpgid(0, p.pgid);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != p.parent) ::_exit(kExitCannotExec);  // sqzrun died already
  if (p.cpus && ::sched_setaffinity(0, p.cpus->size(), p.cpus->get()) != 0)
    report(p.reportFd, ChildStage::kBind, errno);  // a warning: it runs unbound
  if (p.stdinFd >= 0) ::dup2(p.stdinFd, STDIN_FILENO);
  if (p.outFd >= 0) ::dup2(p.outFd, STDOUT_FILENO);
  if (p.errFd >= 0) ::dup2(p.errFd, STDERR_FILENO);
  ::setrlimit(RLIMIT_NOFILE, p.nofile);
  ::pthread_sigmask(SIG_SETMASK, p.mask, nullptr);
  ::execve(p.path, p.argv, p.envp);
  if (errno == ENOEXEC) ::execve(p.shArgv[0], p.shArgv, p.envp);
  report(p.reportFd, ChildStage::kExec, errno);
  ::_exit(kExitCannotExec);
}

}  // namespace squeeze::launcher
