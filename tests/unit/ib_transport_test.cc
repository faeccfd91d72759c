// The ib transport's run-time loading and selection (transports/ib/ib_verbs.h, ib_transport.h):
//   - the loader, pointed at a missing file or at a library without the verbs symbols, refuses
//     with a sentence naming the file or the symbol and what to install; the real
//     libibverbs.so.1, where installed, resolves every symbol;
//   - without a usable HCA, SQZ_TRANSPORT=ib alone fails to create the transport with
//     Error(kSystem) saying what is missing, and with other transports listed canConnect() is
//     false for every peer; a malformed SQZ_IB_HCA is Error(kInvalidArgument);
//   - on a host with an RDMA device (else skipped, with the reason): two ranks connected
//     through the transport exchange messages of every size, larger than the ring included.
#include <gtest/gtest.h>

#include "squeeze_config.h"

#if SQZ_HAVE_IBVERBS

#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "core/config.h"
#include "tests/common/transport_pair.h"
#include "transports/ib/ib_transport.h"
#include "transports/ib/ib_verbs.h"

namespace squeeze {
namespace {

using transport_test::makeHeader;
using transport_test::randomBytes;
using transport_test::SocketPairLink;
using transport_test::uniqueHash;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(IbVerbsLoader, MissingLibrarySaysWhatToInstall) {
  std::string why;
  auto v = loadIbVerbs("/nonexistent/dir/libibverbs.so.1", &why);
  EXPECT_EQ(v, nullptr);
  EXPECT_TRUE(contains(why, "/nonexistent/dir/libibverbs.so.1")) << why;
  EXPECT_TRUE(contains(why, "libibverbs1")) << why;
}

TEST(IbVerbsLoader, LibraryWithoutTheSymbolsNamesTheFirstMissingOne) {
  std::string why;
  auto v = loadIbVerbs("libc.so.6", &why);
  EXPECT_EQ(v, nullptr);
  EXPECT_TRUE(contains(why, "ibv_get_device_list")) << why;
  EXPECT_TRUE(contains(why, "libc.so.6")) << why;
}

TEST(IbVerbsLoader, RealLibraryResolvesEverySymbol) {
  std::string why;
  const IbVerbs* v = ibVerbs(&why);
  if (!v) GTEST_SKIP() << "libibverbs is not installed here: " << why;
  EXPECT_NE(v->getDeviceList, nullptr);
  EXPECT_NE(v->queryPortCompat, nullptr);
  EXPECT_NE(v->regMr, nullptr);
  EXPECT_NE(v->wcStatusStr, nullptr);
  EXPECT_STREQ(v->wcStatusStr(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded");
  // Listing devices works with none present, too.
  int n = -1;
  ibv_device** list = v->getDeviceList(&n);
  EXPECT_GE(n, 0);
  if (list) v->freeDeviceList(list);
}

CommConfig configWith(std::vector<std::string> transports, std::string hca = "") {
  CommConfig c;
  c.transports = std::move(transports);
  c.ibHca = std::move(hca);
  return c;
}

TEST(IbTransport, AloneWithoutLibibverbsIsAClearError) {
  const CommConfig c = configWith({"ib"});
  IbTransportOptions o;
  o.libraryPath = "/nonexistent/libibverbs.so.1";
  try {
    createIbTransport(TransportContext{0, 2, uniqueHash(), c}, o);
    ADD_FAILURE() << "the ib transport was created without libibverbs";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kSystem) << e.what();
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "SQZ_TRANSPORT=ib")) << m;
    EXPECT_TRUE(contains(m, "libibverbs")) << m;
    EXPECT_TRUE(contains(m, "tcp")) << m << " (should say what else to use)";
  }
}

TEST(IbTransport, WithOthersListedItStepsAside) {
  const CommConfig c = configWith({"shm", "ib", "tcp"});
  IbTransportOptions o;
  o.libraryPath = "libc.so.6";  // loads, but is not libibverbs
  auto t = createIbTransport(TransportContext{0, 2, uniqueHash(), c}, o);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name(), "ib");
  PeerInfo self, peer;
  self.rank = 0;
  peer.rank = 1;
  EXPECT_FALSE(t->canConnect(self, peer));
}

TEST(IbTransport, MalformedHcaIsInvalidArgument) {
  const CommConfig c = configWith({"ib", "tcp"}, "mlx5_0:x");
  try {
    createIbTransport(TransportContext{0, 2, uniqueHash(), c});
    ADD_FAILURE() << "SQZ_IB_HCA=mlx5_0:x was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.what(), "SQZ_IB_HCA")) << e.what();
  }
}

TEST(IbTransport, WithoutADeviceTheReasonSaysSo) {
  const std::string why = ibUnavailableReason("", 0);
  if (why.empty()) GTEST_SKIP() << "this host has a usable RDMA port";
  EXPECT_TRUE(contains(why, "libibverbs") || contains(why, "RDMA device") ||
              contains(why, "ACTIVE port"))
      << why;
  // Alone, creation fails with that reason in the message.
  try {
    createIbTransport(TransportContext{0, 2, uniqueHash(), configWith({"ib"})});
    ADD_FAILURE() << "the ib transport was created without a usable port";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kSystem);
    EXPECT_TRUE(contains(e.what(), why)) << e.what();
  }
}

TEST(IbTransport, NamedDeviceThatDoesNotExist) {
  std::string why;
  if (!ibVerbs(&why)) GTEST_SKIP() << "libibverbs is not installed here: " << why;
  why = ibUnavailableReason("sqz_no_such_hca", 0);
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(contains(why, "sqz_no_such_hca") || contains(why, "no RDMA device")) << why;
}

// ---- on hardware ------------------------------------------------------------------------------

TEST(IbTransportHardware, PairExchangesMessagesOfEverySize) {
  const std::string why = ibUnavailableReason("", 0);
  if (!why.empty()) GTEST_SKIP() << "no RDMA device: " << why;
  const uint64_t hash = uniqueHash();
  CommConfig c = configWith({"ib"});
  IbTransportOptions o;
  o.ringBytes = 64 << 10;  // small, so big messages stream through it in pieces
  std::unique_ptr<Transport> t[2];
  PeerInfo info[2];
  for (int r = 0; r < 2; ++r) {
    info[r].rank = r;
    info[r].hostId = "testhost";
    info[r].pid = ::getpid();
    t[r] = createIbTransport(TransportContext{r, 2, hash, c}, o);
    ASSERT_TRUE(t[r]->canConnect(info[r], info[1 - r]));
  }
  int sv[2], wv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, wv), 0);
  SocketPairLink link0(sv[0], wv[0]), link1(sv[1], wv[1]);
  std::unique_ptr<Connection> conn[2];
  std::exception_ptr err[2];
  auto setup = [&](int r, PeerLink& link) {
    try {
      conn[r] = t[r]->connect(LinkSetup{r, info[r], info[1 - r], hash, c, link});
    } catch (...) {
      err[r] = std::current_exception();
    }
  };
  std::thread t0(setup, 0, std::ref(link0)), t1(setup, 1, std::ref(link1));
  t0.join();
  t1.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  ASSERT_STREQ(conn[0]->transportName(), "ib");

  const std::vector<size_t> sizes = {0, 1, 72, 4096, 65535, 65536, 200000, 4 << 20, 3};
  const size_t n = sizes.size();
  std::vector<std::vector<uint8_t>> src[2], dst[2];
  std::vector<TransferRequest> sreq[2], rreq[2];
  for (int r = 0; r < 2; ++r) {
    src[r].resize(n);
    dst[r].resize(n);
    sreq[r].resize(n);
    rreq[r].resize(n);
    for (size_t i = 0; i < n; ++i) {
      src[r][i] = randomBytes(sizes[i], uint32_t(r * 100 + i));
      dst[r][i].assign(sizes[i], 0);
      conn[r]->isend(makeHeader(hash, r, 1, uint32_t(i), sizes[i]), src[r][i].data(), &sreq[r][i]);
      conn[r]->irecv(makeHeader(hash, 1 - r, 1, uint32_t(i), 0), dst[r][i].data(), dst[r][i].size(),
                     &rreq[r][i]);
    }
  }
  auto drive = [&](int r) {
    try {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      for (;;) {
        bool all = true;
        for (size_t i = 0; i < n; ++i) all &= sreq[r][i].done && rreq[r][i].done;
        if (all || std::chrono::steady_clock::now() > deadline) return;
        if (!conn[r]->progress()) {
          WaitSources ws;
          conn[r]->addWaitSources(ws);
          waitForActivity(ws, 0, 50);
        }
      }
    } catch (...) {
      err[r] = std::current_exception();
    }
  };
  std::thread d0(drive, 0), d1(drive, 1);
  d0.join();
  d1.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(rreq[r][i].done && sreq[r][i].done) << "message " << i << " to rank " << r;
      EXPECT_EQ(dst[r][i], src[1 - r][i]) << "message " << i << " to rank " << r;
    }
}

}  // namespace
}  // namespace squeeze

#else  // !SQZ_HAVE_IBVERBS

TEST(IbTransport, NotBuilt) {
  GTEST_SKIP() << "built without infiniband/verbs.h (libibverbs-dev): the ib transport, its "
                  "loader and its hardware tests are not compiled in";
}

#endif
