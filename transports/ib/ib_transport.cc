// The ib transport: port selection at creation, and pair setup (see ib_transport.h for the
// steps). The data path is ib_connection.cc; the verbs calls are ib_device.cc.
#include "transports/ib/ib_transport.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <optional>
#include <random>

#include "base/error.h"
#include "base/logging.h"
#include "base/strings.h"
#include "transports/ib/ib_connection.h"
#include "transports/ib/ib_device.h"
#include "transports/ib/ib_record.h"
#include "transports/ib/ib_verbs.h"

namespace squeeze {
namespace {

constexpr uint32_t kSetupOk = 0x4b4f4249;      // "IBOK"
constexpr uint32_t kSetupFailed = 0x4c494146;  // "FAIL"
// The one data socket of an ib pair: the liveness watch (no data moves over it).
constexpr uint16_t kWatchSocketIndex = 0;

// libibverbs from an explicit path (tests): loaded once per path, kept for the process's life
// like the default one (contexts and connections refer to the table).
const IbVerbs* verbsAt(const std::string& path, std::string* whyNot) {
  static std::mutex mu;  // protects loaded
  // Never destroyed, like the default table (ib_verbs.cc).
  static auto* loaded = new std::deque<std::pair<std::string, std::unique_ptr<IbVerbs>>>;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [p, v] : *loaded)
    if (p == path) return v.get();
  auto v = loadIbVerbs(path, whyNot);
  if (!v) return nullptr;
  loaded->emplace_back(path, std::move(v));
  return loaded->back().second.get();
}

uint32_t randomPsn() {
  static std::mutex mu;  // protects rng
  static std::mt19937 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return rng() & 0xffffff;
}

std::optional<IbPort> probe(const std::string& libraryPath, const std::string& hca, int gidIndex,
                            std::string* whyNot) {
  const IbHcaSpec spec = parseIbHcaSpec(hca);  // a malformed setting is an error either way
  const IbVerbs* v = libraryPath.empty() ? ibVerbs(whyNot) : verbsAt(libraryPath, whyNot);
  if (!v) return std::nullopt;
  return findIbPort(*v, spec, gidIndex, whyNot);
}

class IbTransport final : public Transport {
 public:
  IbTransport(const TransportContext& ctx, const IbTransportOptions& opts)
      : myRank_(ctx.myRank),
        nranks_(ctx.nranks),
        commHash_(ctx.commHash),
        ringBytes_(opts.ringBytes) {
    SQZ_ENFORCE(ringBytes_ >= kIbMinRingBytes && ringBytes_ <= kIbMaxRingBytes, "ib ring of ",
                ringBytes_, " bytes");
    std::string why;
    port_ = probe(opts.libraryPath, ctx.config.ibHca, ctx.config.ibGidIndex, &why);
    if (port_) {
      SQZ_INFO(kTransport, "rank ", myRank_, ": ib transport on ", port_->describe());
      return;
    }
    const auto& names = ctx.config.transports;
    const bool alone =
        std::all_of(names.begin(), names.end(), [](const std::string& n) { return n == "ib"; });
    if (alone)
      raise(ErrorCode::kSystem, "rank ", myRank_,
            ": SQZ_TRANSPORT=ib, but the ib transport cannot run on this host: ", why,
            ". Fix that, or let another transport carry the traffic (e.g. "
            "SQZ_TRANSPORT=shm,ib,tcp uses ib where it works and tcp elsewhere).");
    SQZ_INFO(kTransport, "rank ", myRank_,
             ": the ib transport is unavailable, so the other transports in SQZ_TRANSPORT "
             "carry the traffic: ",
             why);
  }

  const char* name() const override { return "ib"; }

  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return port_.has_value() && self.rank != peer.rank;
  }

  std::unique_ptr<Connection> connect(const LinkSetup& setup) override {
    const int peer = setup.peer.rank;
    SQZ_ENFORCE(port_.has_value(), "ib connect without a port");
    SQZ_ENFORCE(setup.myRank == myRank_ && peer != myRank_ && peer >= 0 && peer < nranks_,
                "ib connect from rank ", setup.myRank, " to rank ", peer);
    SQZ_ENFORCE_EQ(setup.commHash, commHash_);
    PeerLink& link = setup.link;

    std::unique_ptr<VerbsQp> qp = VerbsQp::create(*port_, ringBytes_);
    IbConnRecord mine = qp->localRecord();
    mine.commHash = commHash_;
    mine.rank = myRank_;
    mine.psn = randomPsn();
    link.sendString(encodeIbRecord(mine));

    // Both sides report how bringing the queue pair up went before either goes on, so that a
    // failure on one side (a bad record, another fabric, a refused transition) fails both now
    // instead of leaving the other to wait for the setup deadline.
    IbConnRecord theirs;
    uint32_t status = kSetupOk;
    try {
      theirs =
          parseIbRecord(link.recvString(kIbRecordBytes), IbRecordExpect{peer, commHash_, myRank_});
      if (theirs.linkLayer != mine.linkLayer)
        raise(ErrorCode::kInvalidUsage, "rank ", myRank_, " uses ib over ", port_->describe(),
              " but rank ", peer, " over ", ibLinkLayerName(theirs.linkLayer),
              "; an RC queue pair needs both on one fabric: set SQZ_IB_HCA on every rank");
      qp->connectTo(theirs, mine.psn);
    } catch (...) {
      status = kSetupFailed;
      try {
        link.sendBytes(&status, sizeof status);
      } catch (...) {
        // The peer is gone as well; the first error says more.
      }
      throw;
    }
    link.sendBytes(&status, sizeof status);
    uint32_t peerStatus = 0;
    link.recvBytes(&peerStatus, sizeof peerStatus);
    if (peerStatus != kSetupOk)
      raise(ErrorCode::kRemote, "rank ", peer,
            " could not bring up its end of the ib connection to rank ", myRank_, " (rank ", peer,
            "'s own error says why)");

    Socket watch = link.openDataSocket(kWatchSocketIndex);
    IbConnectionParams params;
    params.myRank = myRank_;
    params.peerRank = peer;
    params.maxWrites = std::min(kIbMaxWrites, theirs.maxWrites);
    params.sendQueueDepth = kIbSendQueueDepth;
    SQZ_INFO(kTransport, "rank ", myRank_, " -> rank ", peer, ": ib over ", port_->describe(),
             ", QP ", mine.qpn, " -> ", theirs.qpn, ", MTU ",
             ibMtuBytes(std::min(mine.mtu, theirs.mtu)), ", rings ", formatBytes(ringBytes_),
             " in / ", formatBytes(theirs.ringBytes), " out");
    return makeIbConnection(std::move(qp), params, std::move(watch));
  }

 private:
  const int myRank_;
  const int nranks_;
  const uint64_t commHash_;
  const uint64_t ringBytes_;
  std::optional<IbPort> port_;  // none: ib cannot run here
};

}  // namespace

std::unique_ptr<Transport> createIbTransport(const TransportContext& ctx) {
  return std::make_unique<IbTransport>(ctx, IbTransportOptions{});
}

std::unique_ptr<Transport> createIbTransport(const TransportContext& ctx,
                                             const IbTransportOptions& options) {
  return std::make_unique<IbTransport>(ctx, options);
}

std::string ibUnavailableReason(const std::string& hca, int gidIndex) {
  std::string why;
  return probe("", hca, gidIndex, &why) ? std::string() : why;
}

}  // namespace squeeze
