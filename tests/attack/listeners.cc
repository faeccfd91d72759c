// Discovery: a process tree's listening ports, from /proc (see listeners.h).
#include "listeners.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

namespace squeeze::attack {
namespace {

// pid and every descendant, through /proc/P/task/T/children (one read per task), or, where the
// kernel lacks that file, through the parent field of every /proc/N/stat.
std::vector<pid_t> processTree(pid_t root) {
  std::vector<pid_t> tree{root};
  bool haveChildrenFiles = true;
  for (size_t i = 0; i < tree.size() && haveChildrenFiles; ++i) {
    const std::string taskDir = "/proc/" + std::to_string(tree[i]) + "/task";
    DIR* d = opendir(taskDir.c_str());
    if (!d) continue;  // exited meanwhile
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream children(taskDir + "/" + e->d_name + "/children");
      if (!children) {
        haveChildrenFiles = i > 0;  // missing for the root's tasks: no such file on this kernel
        continue;
      }
      pid_t child;
      while (children >> child) tree.push_back(child);
    }
    closedir(d);
  }
  if (haveChildrenFiles) return tree;

  std::multimap<pid_t, pid_t> byParent;
  DIR* proc = opendir("/proc");
  if (!proc) return {root};
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 2));
    char state;
    pid_t ppid;
    if (rest >> state >> ppid) byParent.emplace(ppid, static_cast<pid_t>(pid));
  }
  closedir(proc);
  tree.assign(1, root);
  for (size_t i = 0; i < tree.size(); ++i) {
    auto [lo, hi] = byParent.equal_range(tree[i]);
    for (auto it = lo; it != hi; ++it) tree.push_back(it->second);
  }
  return tree;
}

std::set<unsigned long> socketInodes(const std::vector<pid_t>& pids) {
  std::set<unsigned long> inodes;
  for (pid_t pid : pids) {
    const std::string fdDir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* d = opendir(fdDir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      char link[64];
      ssize_t n = readlink((fdDir + "/" + e->d_name).c_str(), link, sizeof link - 1);
      if (n <= 0) continue;
      link[n] = '\0';
      unsigned long inode;
      if (std::sscanf(link, "socket:[%lu]", &inode) == 1) inodes.insert(inode);
    }
    closedir(d);
  }
  return inodes;
}

// LISTEN (state 0A) entries of /proc/PID/net/tcp{,6} whose inode is in `inodes`.
Listeners listeners(pid_t pid, const std::set<unsigned long>& inodes) {
  Listeners out;
  for (int family : {AF_INET, AF_INET6}) {
    std::ifstream table("/proc/" + std::to_string(pid) +
                        (family == AF_INET ? "/net/tcp" : "/net/tcp6"));
    std::string line;
    std::getline(table, line);  // header
    while (std::getline(table, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout;
      unsigned long inode = 0;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode))
        continue;
      if (state != "0A" || !inodes.count(inode)) continue;
      const size_t colon = local.find(':');
      if (colon == std::string::npos) continue;
      const std::string addrHex = local.substr(0, colon);
      Target t;
      t.family = family;
      t.port = static_cast<uint16_t>(std::strtoul(local.c_str() + colon + 1, nullptr, 16));
      // The kernel prints each 32-bit word of the address as it lies in memory, in host order.
      bool isLoopback;
      if (family == AF_INET) {
        in_addr a{};
        a.s_addr = static_cast<uint32_t>(std::strtoul(addrHex.c_str(), nullptr, 16));
        isLoopback = addrHex.size() == 8 && a.s_addr == htonl(INADDR_LOOPBACK);
      } else {
        in6_addr a{};
        for (int w = 0; w < 4 && addrHex.size() == 32; ++w) {
          uint32_t word =
              static_cast<uint32_t>(std::strtoul(addrHex.substr(8 * w, 8).c_str(), nullptr, 16));
          std::memcpy(a.s6_addr + 4 * w, &word, 4);
        }
        isLoopback = addrHex.size() == 32 && IN6_IS_ADDR_LOOPBACK(&a);
      }
      if (isLoopback)
        out.loopback.insert(t);
      else
        out.other.insert(local + " (" + (family == AF_INET ? "tcp" : "tcp6") + ")");
    }
  }
  return out;
}

}  // namespace

bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

Listeners findListeners(pid_t pid) { return listeners(pid, socketInodes(processTree(pid))); }

}  // namespace squeeze::attack
