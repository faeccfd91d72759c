// HCA, port and queue pair handling for the ib transport (see ib_device.h).
//
// Queue pair attributes (the usual RC set): INIT with remote write access; RTR with the path MTU
// both ports support, the peer's QPN and PSN, min_rnr_timer 12 (0.64 ms), and an address vector
// by LID (InfiniBand) or by GID with a GRH (RoCE, sgid index SQZ_IB_GID_INDEX, hop limit 255);
// RTS with timeout 14 (4.096 us * 2^14 = 67 ms per try) and retry_cnt 7, so a dead peer turns
// into an error completion within about half a second of traffic, and rnr_retry 7 (the receive
// queue never runs dry by construction, see ib_credits.h, so this is only a safety net).
#include "transports/ib/ib_device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "base/error.h"
#include "base/logging.h"
#include "base/strings.h"
#include "transports/ib/ib_connection.h"

namespace squeeze {
namespace {

static_assert(IBV_LINK_LAYER_INFINIBAND == kIbLinkLayerInfiniBand);
static_assert(IBV_LINK_LAYER_ETHERNET == kIbLinkLayerEthernet);
static_assert(IBV_MTU_256 == kIbMtuMin && IBV_MTU_4096 == kIbMtuMax);

constexpr int kPollMax = 32;
constexpr uint32_t kRecvBatch = 64;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

size_t pageRound(size_t n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

const char* portStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
  }
  return "unknown";
}

// Devices opened by this process, by name: every communicator on one HCA shares one context.
std::mutex gContextsMu;  // protects gContexts
std::map<std::string, std::weak_ptr<IbContext>> gContexts;

}  // namespace

// ---- IbContext ----------------------------------------------------------------------------

std::shared_ptr<IbContext> IbContext::open(const IbVerbs& verbs, ibv_device* device) {
  const std::string name = verbs.getDeviceName(device);
  std::lock_guard<std::mutex> lock(gContextsMu);
  if (auto ctx = gContexts[name].lock()) return ctx;
  errno = 0;
  ibv_context* raw = verbs.openDevice(device);
  if (!raw)
    throw SysError(strCat("ibv_open_device(", name,
                          ") failed (check the permissions of "
                          "/dev/infiniband/uverbs*, and that a container was given them)"),
                   errno ? errno : ENODEV);
  std::shared_ptr<IbContext> ctx(new IbContext(verbs, raw, name));
  gContexts[name] = ctx;
  return ctx;
}

IbContext::IbContext(const IbVerbs& verbs, ibv_context* ctx, std::string name)
    : verbs_(verbs), ctx_(ctx), name_(std::move(name)) {
  errno = 0;
  pd_ = verbs_.allocPd(ctx_);
  if (!pd_) {
    const int err = errno ? errno : ENOMEM;
    verbs_.closeDevice(ctx_);
    throw SysError(strCat("ibv_alloc_pd on ", name_, " failed"), err);
  }
  cache_.emplace(
      kIbPoolBytes, [this](void* addr, size_t len) { return registerRange(addr, len); },
      [this](void* handle) { verbs_.deregMr(static_cast<ibv_mr*>(handle)); });
}

IbContext::~IbContext() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Slab& s : free_) {
      cache_->invalidate(s.data, s.bytes);
      ::munmap(s.data, s.bytes);
    }
    free_.clear();
    cache_.reset();  // every registration goes before the protection domain
  }
  verbs_.deallocPd(pd_);
  verbs_.closeDevice(ctx_);
}

void* IbContext::registerRange(void* addr, size_t len) {
  errno = 0;
  ibv_mr* mr = verbs_.regMr(pd_, addr, len, kAccess);
  if (!mr)
    throw SysError(strCat("ibv_reg_mr of ", formatBytes(len), " on ", name_,
                          " failed (ENOMEM usually means the locked-memory limit is too low: "
                          "raise `ulimit -l`, e.g. to unlimited, for the ranks)"),
                   errno ? errno : ENOMEM);
  return mr;
}

IbBuffer IbContext::acquireBuffer(size_t bytes) {
  const size_t size = pageRound(std::max<size_t>(bytes, 1));
  std::lock_guard<std::mutex> lock(mu_);
  Slab slab{nullptr, size};
  for (auto it = free_.rbegin(); it != free_.rend(); ++it)  // newest first: likeliest registered
    if (it->bytes == size) {
      slab = *it;
      free_.erase(std::next(it).base());
      freeBytes_ -= size;
      break;
    }
  if (!slab.data) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw SysError(strCat("mapping a ", formatBytes(size), " ib ring buffer"), errno);
    // A child process (fork) must not share these pages copy-on-write: the HCA keeps writing
    // the parent's pinned originals while a parent write would land in a copy.
    ::madvise(p, size, MADV_DONTFORK);
    slab.data = static_cast<uint8_t*>(p);
  }
  const RegCache::Entry* reg;
  try {
    reg = cache_->acquire(slab.data, slab.bytes);
  } catch (...) {
    cache_->invalidate(slab.data, slab.bytes);
    ::munmap(slab.data, slab.bytes);
    throw;
  }
  auto* mr = static_cast<ibv_mr*>(reg->handle);
  return IbBuffer{slab.data, slab.bytes, mr->lkey, mr->rkey, reg};
}

void IbContext::releaseBuffer(IbBuffer& b) {
  if (!b.data) return;
  std::lock_guard<std::mutex> lock(mu_);
  cache_->release(b.reg);
  free_.push_back(Slab{b.data, b.bytes});
  freeBytes_ += b.bytes;
  while (freeBytes_ > kIbPoolBytes) {
    const Slab s = free_.front();
    free_.pop_front();
    freeBytes_ -= s.bytes;
    cache_->invalidate(s.data, s.bytes);
    ::munmap(s.data, s.bytes);
  }
  b = IbBuffer{};
}

// ---- port selection -----------------------------------------------------------------------

std::string IbPort::describe() const {
  std::string s = strCat(ctx->name(), " port ", int(port), " (", ibLinkLayerName(linkLayer));
  if (linkLayer == kIbLinkLayerInfiniBand) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "%#x", unsigned(lid));
    s += strCat(", LID ", hex);
  } else {
    s += strCat(", GID index ", int(gidIndex));
  }
  return s + strCat(", MTU ", ibMtuBytes(mtu), ")");
}

std::optional<IbPort> findIbPort(const IbVerbs& v, const IbHcaSpec& spec, int gidIndex,
                                 std::string* whyNot) {
  int n = 0;
  ibv_device** list = v.getDeviceList(&n);
  if (!list || n == 0) {
    const int err = errno;
    if (list) v.freeDeviceList(list);
    *whyNot = strCat("no RDMA device was found (",
                     list ? std::string("libibverbs lists none")
                          : strCat("ibv_get_device_list: ", std::strerror(err)),
                     "): this host has no HCA, its kernel driver is not loaded, or "
                     "/dev/infiniband is not visible here (a container without it); "
                     "`ibv_devices` shows what libibverbs sees");
    return std::nullopt;
  }
  struct ListGuard {
    const IbVerbs& v;
    ibv_device** list;
    ~ListGuard() { v.freeDeviceList(list); }
  } guard{v, list};

  std::string seen;      // "mlx5_0 port 1: DOWN; ..."
  std::string problems;  // why an ACTIVE port was not usable
  std::string names;
  bool named = false;
  for (int i = 0; i < n; ++i) {
    const std::string name = v.getDeviceName(list[i]);
    names += (names.empty() ? "" : ", ") + name;
    if (!spec.device.empty() && name != spec.device) continue;
    named = true;
    std::shared_ptr<IbContext> ctx;
    try {
      ctx = IbContext::open(v, list[i]);
    } catch (const Error& e) {
      problems += strCat(problems.empty() ? "" : "; ", e.what());
      continue;
    }
    ibv_device_attr dattr{};
    if (int rc = v.queryDevice(ctx->context(), &dattr); rc != 0) {
      problems += strCat(problems.empty() ? "" : "; ", "ibv_query_device(", name,
                         ") failed: ", std::strerror(rc));
      continue;
    }
    const int first = spec.port ? spec.port : 1;
    const int last = spec.port ? spec.port : dattr.phys_port_cnt;
    if (spec.port > dattr.phys_port_cnt) {
      problems += strCat(problems.empty() ? "" : "; ", name, " has ", int(dattr.phys_port_cnt),
                         " port(s), not port ", spec.port);
      continue;
    }
    for (int p = first; p <= last; ++p) {
      ibv_port_attr pattr{};
      if (int rc = v.queryPort(ctx->context(), static_cast<uint8_t>(p), &pattr); rc != 0) {
        problems += strCat(problems.empty() ? "" : "; ", "ibv_query_port(", name, ", ", p,
                           ") failed: ", std::strerror(rc));
        continue;
      }
      seen += strCat(seen.empty() ? "" : ", ", name, " port ", p, " ", portStateName(pattr.state));
      if (pattr.state != IBV_PORT_ACTIVE) continue;
      IbPort port;
      port.ctx = ctx;
      port.port = static_cast<uint8_t>(p);
      port.linkLayer = pattr.link_layer == IBV_LINK_LAYER_UNSPECIFIED
                           ? kIbLinkLayerInfiniBand  // old providers leave it unset on IB
                           : pattr.link_layer;
      port.lid = pattr.lid;
      port.mtu = static_cast<uint8_t>(pattr.active_mtu);
      port.gidIndex = static_cast<uint8_t>(gidIndex);
      ibv_gid gid{};
      const bool haveGid = gidIndex < pattr.gid_tbl_len &&
                           v.queryGid(ctx->context(), port.port, gidIndex, &gid) == 0;
      if (haveGid) std::memcpy(port.gid.data(), gid.raw, 16);
      const bool gidZero =
          std::all_of(port.gid.begin(), port.gid.end(), [](uint8_t b) { return b == 0; });
      if (port.linkLayer == kIbLinkLayerEthernet && gidZero) {
        problems += strCat(
            problems.empty() ? "" : "; ", name, " port ", p, " is RoCE, but GID index ", gidIndex,
            gidIndex < pattr.gid_tbl_len ? " is empty"
                                         : strCat(" is past its table of ", pattr.gid_tbl_len),
            ": set SQZ_IB_GID_INDEX to a populated index (`show_gids`, or "
            "`ibv_devinfo -v`; RoCE v2 over IPv4 is often 3)");
        continue;
      }
      if (port.linkLayer == kIbLinkLayerInfiniBand && (port.lid == 0 || port.lid >= 0xc000)) {
        problems += strCat(problems.empty() ? "" : "; ", name, " port ", p,
                           " is InfiniBand but has no unicast LID (", port.lid,
                           "): is a subnet manager running?");
        continue;
      }
      if (port.mtu < kIbMtuMin || port.mtu > kIbMtuMax) {
        problems += strCat(problems.empty() ? "" : "; ", name, " port ", p,
                           " reports active MTU code ", int(port.mtu));
        continue;
      }
      return port;
    }
  }
  if (!spec.device.empty() && !named) {
    *whyNot = strCat("SQZ_IB_HCA names device '", spec.device, "', but this host has ", names);
    return std::nullopt;
  }
  *whyNot = strCat("no usable ACTIVE port", spec.device.empty() ? "" : strCat(" on ", spec.device),
                   spec.port ? strCat(" port ", spec.port) : "", " (",
                   seen.empty() ? "no port could be queried" : seen, ")",
                   problems.empty() ? "" : strCat(": ", problems),
                   "; `ibv_devinfo` shows the ports, SQZ_IB_HCA=device:port picks one");
  return std::nullopt;
}

// ---- VerbsQp ------------------------------------------------------------------------------

std::unique_ptr<VerbsQp> VerbsQp::create(const IbPort& port, uint64_t recvRingBytes) {
  std::unique_ptr<VerbsQp> q(new VerbsQp(port));
  q->init(recvRingBytes);  // on a throw, the destructor releases what was made
  return q;
}

void VerbsQp::init(uint64_t recvRingBytes) {
  const IbVerbs& v = port_.ctx->verbs();
  const std::string& dev = port_.ctx->name();
  errno = 0;
  channel_ = v.createCompChannel(port_.ctx->context());
  if (!channel_)
    throw SysError(strCat("ibv_create_comp_channel on ", dev, " failed"), errno ? errno : ENOMEM);
  const int flags = ::fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw SysError("making the ib completion channel non-blocking", errno);
  errno = 0;
  cq_ = v.createCq(port_.ctx->context(), int(kIbSendQueueDepth + kIbRecvQueueDepth), nullptr,
                   channel_, 0);
  if (!cq_) throw SysError(strCat("ibv_create_cq on ", dev, " failed"), errno ? errno : ENOMEM);
  ibv_qp_init_attr ia{};
  ia.send_cq = cq_;
  ia.recv_cq = cq_;
  ia.cap.max_send_wr = kIbSendQueueDepth;
  ia.cap.max_recv_wr = kIbRecvQueueDepth;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = 0;
  errno = 0;
  qp_ = v.createQp(port_.ctx->pd(), &ia);
  if (!qp_)
    throw SysError(strCat("ibv_create_qp (RC) on ", dev, " failed"), errno ? errno : ENOMEM);
  recvRingBytes_ = recvRingBytes;
  ring_ = port_.ctx->acquireBuffer(recvRingBytes);

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port_.port;
  a.qp_access_flags = kAccess;
  modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT", -1);
  postRecvs(kIbRecvQueueDepth);
}

VerbsQp::~VerbsQp() {
  const IbVerbs& v = port_.ctx->verbs();
  // The queue pair first: after it no work request touches the buffers.
  if (qp_) v.destroyQp(qp_);
  if (cq_) v.destroyCq(cq_);  // every event was acknowledged in takeEvents()
  if (channel_) v.destroyCompChannel(channel_);
  port_.ctx->releaseBuffer(staging_);
  port_.ctx->releaseBuffer(ring_);
}

void VerbsQp::modify(ibv_qp_attr& attr, int mask, const char* what, int peerRank) {
  if (int rc = port_.ctx->verbs().modifyQp(qp_, &attr, mask); rc != 0)
    throw SysError(strCat("moving the ib queue pair on ", port_.describe(),
                          peerRank >= 0 ? strCat(" to rank ", peerRank) : std::string(), " to ",
                          what, " failed",
                          port_.linkLayer == kIbLinkLayerEthernet
                              ? " (on RoCE check SQZ_IB_GID_INDEX: both ranks need GIDs of the "
                                "same type and subnet)"
                              : " (check that both ranks' ports are on one fabric)"),
                   rc);
}

IbConnRecord VerbsQp::localRecord() const {
  IbConnRecord r;
  r.qpn = qp_->qp_num;
  r.lid = port_.lid;
  r.port = port_.port;
  r.linkLayer = port_.linkLayer;
  r.mtu = port_.mtu;
  r.gidIndex = port_.gidIndex;
  r.gid = port_.gid;
  r.maxWrites = kIbMaxWrites;
  r.ringAddr = reinterpret_cast<uintptr_t>(ring_.data);
  r.ringRkey = ring_.rkey;
  r.ringBytes = recvRingBytes_;
  return r;
}

void VerbsQp::connectTo(const IbConnRecord& peer, uint32_t myPsn) {
  staging_ = port_.ctx->acquireBuffer(peer.ringBytes);
  peerRingBytes_ = peer.ringBytes;
  peerRingAddr_ = peer.ringAddr;
  peerRkey_ = peer.ringRkey;

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min(port_.mtu, peer.mtu));
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = port_.port;
  a.ah_attr.sl = 0;
  a.ah_attr.src_path_bits = 0;
  if (port_.linkLayer == kIbLinkLayerEthernet) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid.data(), 16);
    a.ah_attr.grh.sgid_index = port_.gidIndex;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = 0;
    a.ah_attr.grh.flow_label = 0;
  } else {
    a.ah_attr.is_global = 0;
    a.ah_attr.dlid = peer.lid;
  }
  modify(a,
         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
         "RTR", peer.rank);

  ibv_qp_attr b{};
  b.qp_state = IBV_QPS_RTS;
  b.timeout = 14;
  b.retry_cnt = 7;
  b.rnr_retry = 7;
  b.sq_psn = myPsn;
  b.max_rd_atomic = 1;
  modify(b,
         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC,
         "RTS", peer.rank);
}

void VerbsQp::postWrite(uint64_t offset, uint32_t len, uint32_t imm) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(staging_.data + offset);
  sge.length = len;
  sge.lkey = staging_.lkey;
  ibv_send_wr wr{};
  wr.wr_id = kIbWriteWrId;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = peerRingAddr_ + offset;
  wr.wr.rdma.rkey = peerRkey_;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0)
    throw SysError(
        strCat("ibv_post_send (an RDMA write of ", len, " bytes) on ", port_.ctx->name()), rc);
}

void VerbsQp::postCredit(uint32_t imm) {
  ibv_send_wr wr{};
  wr.wr_id = kIbCreditWrId;
  wr.sg_list = nullptr;
  wr.num_sge = 0;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0)
    throw SysError(strCat("ibv_post_send (a credit) on ", port_.ctx->name()), rc);
}

void VerbsQp::postRecvs(uint32_t n) {
  ibv_recv_wr wrs[kRecvBatch];
  while (n > 0) {
    const uint32_t k = std::min(n, kRecvBatch);
    for (uint32_t i = 0; i < k; ++i) {
      wrs[i] = ibv_recv_wr{};
      wrs[i].wr_id = kIbRecvWrId;
      wrs[i].sg_list = nullptr;
      wrs[i].num_sge = 0;
      wrs[i].next = i + 1 < k ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(qp_, wrs, &bad); rc != 0)
      throw SysError(strCat("ibv_post_recv on ", port_.ctx->name()), rc);
    n -= k;
  }
}

int VerbsQp::poll(IbCompletion* out, int max) {
  ibv_wc wc[kPollMax];
  const int n = ibv_poll_cq(cq_, std::min(max, kPollMax), wc);
  if (n < 0)
    raise(ErrorCode::kSystem, "ibv_poll_cq on ", port_.ctx->name(),
          " failed: the completion queue overran or the device was removed");
  const IbVerbs& v = port_.ctx->verbs();
  for (int i = 0; i < n; ++i) {
    const ibv_wc& w = wc[i];
    IbCompletion& c = out[i];
    c.ok = w.status == IBV_WC_SUCCESS;
    c.wrId = w.wr_id;
    c.imm = 0;
    c.flushed = w.status == IBV_WC_WR_FLUSH_ERR;
    c.statusText = v.wcStatusStr(w.status);
    if (w.wr_id != kIbRecvWrId) {
      c.kind = IbCompletion::Kind::kSendDone;
      continue;
    }
    c.kind = IbCompletion::Kind::kRecvWrite;  // a failed receive says no more than that
    if (!c.ok) continue;
    if (!(w.wc_flags & IBV_WC_WITH_IMM)) {
      c.ok = false;
      c.statusText = "a message without immediate data (the peer does not speak this protocol)";
      continue;
    }
    c.imm = ntohl(w.imm_data);
    if (w.opcode == IBV_WC_RECV) c.kind = IbCompletion::Kind::kRecvCredit;
  }
  return n;
}

void VerbsQp::armNotify() {
  if (int rc = ibv_req_notify_cq(cq_, 0); rc != 0)
    throw SysError(strCat("ibv_req_notify_cq on ", port_.ctx->name()), rc);
}

bool VerbsQp::takeEvents() {
  const IbVerbs& v = port_.ctx->verbs();
  bool any = false;
  for (;;) {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (v.getCqEvent(channel_, &cq, &ctx) != 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        throw SysError(strCat("ibv_get_cq_event on ", port_.ctx->name()), errno);
      return any;
    }
    v.ackCqEvents(cq, 1);
    any = true;
  }
}

int VerbsQp::eventFd() const { return channel_->fd; }

void VerbsQp::toError() {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (int rc = port_.ctx->verbs().modifyQp(qp_, &a, IBV_QP_STATE); rc != 0)
    SQZ_DEBUG(kTransport, "moving an ib queue pair to the error state failed: ", std::strerror(rc));
}

}  // namespace squeeze
