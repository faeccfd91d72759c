// Process census: fds, threads and shared-memory segments from /proc and /dev/shm (see
// census.h).
#include "census.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace squeeze::fault {
namespace {

// Calls fn(name) for every entry of the directory but . and ..; false when it cannot be read.
template <class F>
bool forEachEntry(const char* path, F&& fn) {
  DIR* d = opendir(path);
  if (!d) return false;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') fn(std::string(e->d_name));
  closedir(d);
  return true;
}

int countDirEntries(const char* path) {
  int n = 0;
  if (!forEachEntry(path, [&](const std::string&) { ++n; })) return -1;
  return n;  // for /proc/self/fd this includes opendir's own fd, the same every time
}

// The first line of a small file, without its newline ("?" when it cannot be read).
std::string firstLine(const std::string& path) {
  char buf[256] = {};
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return "?";
  if (!std::fgets(buf, sizeof buf, f)) buf[0] = '\0';
  std::fclose(f);
  buf[std::strcspn(buf, "\n")] = '\0';
  return buf;
}

}  // namespace

std::string listFds() {
  std::string out;
  const bool read = forEachEntry("/proc/self/fd", [&](const std::string& fd) {
    char target[256] = {};
    const std::string link = "/proc/self/fd/" + fd;
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    out += (out.empty() ? "" : ", ") + fd + "->" + (n > 0 ? target : "?");
  });
  return read ? out : "(cannot read /proc/self/fd)";
}

std::string listThreads() {
  std::string out;
  const bool read = forEachEntry("/proc/self/task", [&](const std::string& tid) {
    out += (out.empty() ? "" : ", ") + tid + ":" + firstLine("/proc/self/task/" + tid + "/comm");
  });
  return read ? out : "(cannot read /proc/self/task)";
}

std::vector<std::string> shmSegmentsOf(pid_t pid) {
  std::vector<std::string> found;
  // Appended piecewise: g++ 12 warns (-Wrestrict, a false positive) on "-" + std::to_string.
  std::string mark = "-";
  mark += std::to_string(pid);
  mark += '-';
  forEachEntry("/dev/shm", [&](const std::string& name) {
    if (name.starts_with("sqz-") && name.find(mark) != std::string::npos) found.push_back(name);
  });
  return found;
}

Census takeCensus() {
  return {countDirEntries("/proc/self/fd"), countDirEntries("/proc/self/task")};
}

}  // namespace squeeze::fault
