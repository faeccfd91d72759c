// Cross-memory attach (process_vm_readv) for the shm transport's single-copy path: the receiver
// of a large message copies it straight out of the sender's address space into its own buffer,
// once, instead of sender -> ring -> receiver. Here: the raw read, the sender's check that a
// buffer can be read that way, and the connect-time negotiation in which each side proves over
// the PeerLink that it can read the other (yama ptrace_scope, containers, other users and other
// pid namespaces forbid or break it) and both agree on the threshold of each direction.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace squeeze {

class PeerLink;

// What the two sides of a pair agreed at connect time. A threshold of 0 means the direction
// carries every payload through the ring; otherwise each message of at least that many payload
// bytes is followed in the ring by a SingleCopyDesc instead of (or in front of) its payload.
struct SingleCopyPlan {
  size_t outThreshold = 0;  // this rank -> peer (the peer reads this rank's memory)
  size_t inThreshold = 0;   // peer -> this rank (this rank reads the peer's memory)
  pid_t peerPid = 0;        // the peer's pid as the peer's own getpid() says
  std::string outWhy;       // why outThreshold is 0 (empty when it is not)
  std::string inWhy;        // why inThreshold is 0 (empty when it is not)
};

// Both ranks of a pair call it at the same point of connect(), with their own
// SQZ_SHM_SINGLE_COPY_BYTES (0: never). Each exposes a random probe word on its stack, the other
// reads it with process_vm_readv, and each reports the outcome back. A direction is single-copy
// only if its receiver read the word and both settings are non-zero; its threshold is the larger
// setting. Throws Error(kRemote) on a malformed peer message (and what the PeerLink throws).
SingleCopyPlan negotiateSingleCopy(PeerLink& link, int myRank, int peerRank, size_t myThreshold);

// process_vm_readv of n bytes at `remote` in process pid into `local`. Returns the bytes read
// (fewer than n when a fault stopped it partway), or -errno. Never throws.
ssize_t readPeerMemory(pid_t pid, void* local, uint64_t remote, size_t n);

// Whether another process could read [p, p + n) with process_vm_readv, judged by reading its
// first and last byte from this process the same way (memory such as device-mapped pinned
// buffers is readable here but not through the kernel's page pinning). About a microsecond.
bool crossReadable(const void* p, size_t n);

// A hint for a process_vm_readv errno: what usually causes it, and what to do.
std::string crossReadHint(int err);

// Test hooks (see shm_transport.h): the probe read of rank failProbeOfRank fails as if the
// kernel forbade it; every crossReadable() says no while failCrossReadable is set.
void setSingleCopyTestHooks(int failProbeOfRank, bool failCrossReadable);

}  // namespace squeeze
