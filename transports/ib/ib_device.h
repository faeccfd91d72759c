// The verbs side of the ib transport: the HCA (IbContext: device context, protection domain,
// and a pool of registered ring buffers), the port SQZ_IB_HCA and SQZ_IB_GID_INDEX select
// (IbPort), and VerbsQp, the IbQp that drives a real RC queue pair.
//
// IbContext is shared by every communicator of the process that uses the same device (a
// registry of weak pointers), and by their connections, which may outlive their transport. Ring
// and staging buffers come from its pool: page-aligned anonymous mappings registered through the
// registration cache (ib_reg_cache.h). A buffer a finished connection gives back stays mapped
// and registered (up to kIbPoolBytes of them), so the next communicator's connections get
// pinned memory without registering again; beyond that the oldest are deregistered and
// unmapped. Caller buffers are never registered: see ib_reg_cache.h for why.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "transports/ib/ib_qp.h"
#include "transports/ib/ib_record.h"
#include "transports/ib/ib_reg_cache.h"
#include "transports/ib/ib_verbs.h"

namespace squeeze {

// Registered memory idle in the pool at most (and registrations idle in the cache at most).
constexpr size_t kIbPoolBytes = size_t{64} << 20;

// A registered buffer from an IbContext's pool.
struct IbBuffer {
  uint8_t* data = nullptr;
  size_t bytes = 0;  // page-rounded
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  const RegCache::Entry* reg = nullptr;
};

class IbContext {
 public:
  // The device's shared context, opened on first use. Throws Error(kSystem) when the device
  // cannot be opened or has no protection domain.
  static std::shared_ptr<IbContext> open(const IbVerbs& verbs, ibv_device* device);
  ~IbContext();
  IbContext(const IbContext&) = delete;
  IbContext& operator=(const IbContext&) = delete;

  const IbVerbs& verbs() const { return verbs_; }
  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }

  // A buffer of at least `bytes`, registered for local and remote write. Thread-safe. Throws
  // Error(kSystem) when memory cannot be mapped or registered (with the usual cause: the
  // locked-memory limit, `ulimit -l`).
  IbBuffer acquireBuffer(size_t bytes);
  // Gives a buffer back once no work request can touch it (its queue pair is destroyed).
  void releaseBuffer(IbBuffer& b);

 private:
  IbContext(const IbVerbs& verbs, ibv_context* ctx, std::string name);
  void* registerRange(void* addr, size_t len);

  struct Slab {
    uint8_t* data;
    size_t bytes;
  };

  const IbVerbs& verbs_;
  ibv_context* ctx_;
  ibv_pd* pd_ = nullptr;
  const std::string name_;
  std::mutex mu_;  // protects cache_, free_, freeBytes_ (communicators on several threads)
  std::optional<RegCache> cache_;
  std::deque<Slab> free_;  // mapped, maybe still registered; oldest first
  size_t freeBytes_ = 0;
};

// The port this process's ib transport uses.
struct IbPort {
  std::shared_ptr<IbContext> ctx;
  uint8_t port = 0;
  uint8_t linkLayer = 0;
  uint16_t lid = 0;
  uint8_t mtu = 0;  // active MTU (enum ibv_mtu)
  uint8_t gidIndex = 0;
  std::array<uint8_t, 16> gid{};

  // "mlx5_0 port 1 (InfiniBand, LID 0x5, MTU 4096)"
  std::string describe() const;
};

/// Finds the port to use: the given device (and port) of SQZ_IB_HCA, else the first device with
/// an ACTIVE port. RoCE ports need a populated GID at gidIndex; InfiniBand ports a LID.
/// @return the port, or nullopt with *whyNot saying what was looked at and what to change.
std::optional<IbPort> findIbPort(const IbVerbs& verbs, const IbHcaSpec& spec, int gidIndex,
                                 std::string* whyNot);

/// An RC queue pair on `port` with its completion queue and channel, its receive ring, and
/// (after connectTo) the staging mirror of the peer's ring.
class VerbsQp final : public IbQp {
 public:
  // Creates the queue pair in INIT with kIbRecvQueueDepth receives posted. Throws Error.
  static std::unique_ptr<VerbsQp> create(const IbPort& port, uint64_t recvRingBytes);
  ~VerbsQp() override;

  // This side's half of the connection record (addressing and ring; not rank, hash or PSN).
  IbConnRecord localRecord() const;
  // Maps the staging mirror of the peer's ring and moves the queue pair to RTR, then RTS.
  // Throws Error naming the peer.
  void connectTo(const IbConnRecord& peer, uint32_t myPsn);

  void postWrite(uint64_t offset, uint32_t len, uint32_t imm) override;
  void postCredit(uint32_t imm) override;
  void postRecvs(uint32_t n) override;
  int poll(IbCompletion* out, int max) override;
  void armNotify() override;
  bool takeEvents() override;
  int eventFd() const override;
  void toError() override;
  uint8_t* sendStaging() override { return staging_.data; }
  const uint8_t* recvRing() const override { return ring_.data; }
  uint64_t sendRingBytes() const override { return peerRingBytes_; }
  uint64_t recvRingBytes() const override { return recvRingBytes_; }

 private:
  explicit VerbsQp(const IbPort& port) : port_(port) {}
  void init(uint64_t recvRingBytes);
  void modify(ibv_qp_attr& attr, int mask, const char* what, int peerRank);

  const IbPort port_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  IbBuffer ring_;
  IbBuffer staging_;
  uint64_t recvRingBytes_ = 0;
  uint64_t peerRingBytes_ = 0;
  uint64_t peerRingAddr_ = 0;
  uint32_t peerRkey_ = 0;
};

}  // namespace squeeze
