// Process census: what the abort case compares before and after a communicator (open fds,
// threads) and the /dev/shm segments a process left, with lists that say which ones.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace squeeze::fault {

struct Census {
  int fds = 0;
  int threads = 0;
};

// This process's open fds and threads (/proc/self/fd, /proc/self/task).
Census takeCensus();

// "3->/dev/null, 4->socket:[123]": this process's fds and what they are.
std::string listFds();
// The names of this process's threads (/proc/self/task/*/comm), to say which one was left.
std::string listThreads();
// The shared-memory segments of process pid: the shm transport names them
// /sqz-<hash>-...-<pid>-*.
std::vector<std::string> shmSegmentsOf(pid_t pid);

}  // namespace squeeze::fault
