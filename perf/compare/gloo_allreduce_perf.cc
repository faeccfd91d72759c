// gloo-allreduce-perf: sqz-allreduce-perf's table for Gloo's all-reduce (Debian's libgloo-dev),
// so Squeeze can be compared with the library PyTorch's CPU backend is built on.
//
// Gloo's classic algorithms (gloo::AllreduceRing, AllreduceRingChunked, AllreduceHalvingDoubling;
// -A picks one, or all for one table section each) are objects built once over fixed buffers and
// run in place: there is no separate output buffer in their API. So the driver times them as
// Gloo users run them: the algorithm object is built per size, untimed (as Gloo's own benchmark
// does), and its run() is timed in place, in the in-place columns; the out-of-place columns show
// N/A rather than a copy the library does not make. float32 sum, over the TCP transport.
//
// Launch: rank and size from SQZ_RANK/SQZ_WORLD_SIZE (sqzrun) or OMPI_COMM_WORLD_RANK/SIZE
// (mpirun). The ranks meet through gloo::rendezvous::FileStore in --store DIR, a directory that
// exists and that every rank sees; keys are prefixed by the launcher's job id (SQZ_UNIQUE_ID or
// PMIX_NAMESPACE), so one directory serves many runs. Connections bind to the IPv4 address of the
// interface GLOO_SOCKET_IFNAME names (default lo), as PyTorch's gloo backend does.
//   sqzrun -n 4 gloo-allreduce-perf --store /tmp/gloo -b 16M -e 256M -f 16 -A all
#include <arpa/inet.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compare_common.h"

namespace {

using squeeze::compare::fail;

constexpr const char* kProgram = "gloo-allreduce-perf";

// The IPv4 address of interface `name`, or an empty string (with *known set to the interfaces
// that have one, for the message).
std::string ipv4OfInterface(const std::string& name, std::string* known) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    if (name == a->ifa_name && found.empty()) found = text;
    *known += (known->empty() ? "" : ", ") + std::string(a->ifa_name);
  }
  freeifaddrs(list);
  return found;
}

// The job's id from the launcher, so the store keys of different runs never meet.
std::string jobPrefix() {
  for (const char* var : {"SQZ_UNIQUE_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
    const char* v = std::getenv(var);
    if (v && *v) return std::string("gloo-allreduce-perf/") + v;
  }
  return "gloo-allreduce-perf";
}

class GlooGroup : public squeeze::compare::RankGroup {
 public:
  GlooGroup(std::shared_ptr<gloo::Context> context, gloo::rendezvous::Store& store)
      : context_(std::move(context)), store_(store) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  const std::shared_ptr<gloo::Context>& context() const { return context_; }

  double maxOverRanks(double value) override {
    gloo::AllreduceRing<double>(context_, {&value}, 1, gloo::ReductionFunction<double>::max).run();
    return value;
  }
  int64_t sumOverRanks(int64_t value) override {
    gloo::AllreduceRing<int64_t>(context_, {&value}, 1, gloo::ReductionFunction<int64_t>::sum)
        .run();
    return value;
  }
  void barrier() override { gloo::BarrierAllToAll(context_).run(); }

  // Through the store: rare, small, and it needs no variable-size collective.
  std::vector<std::string> gatherToRoot(const std::string& mine) override {
    const std::string base = "gather/" + std::to_string(gathers_++) + "/";
    std::vector<std::string> all;
    if (rank() != 0) {
      store_.set(base + std::to_string(rank()), std::vector<char>(mine.begin(), mine.end() + 1));
      return all;
    }
    all.push_back(mine);
    for (int r = 1; r < size(); ++r) {
      std::vector<char> v = store_.get(base + std::to_string(r));
      all.emplace_back(v.data(), strnlen(v.data(), v.size()));
    }
    return all;
  }

 private:
  std::shared_ptr<gloo::Context> context_;
  gloo::rendezvous::Store& store_;
  int gathers_ = 0;
};

// One Target per Gloo algorithm: the object is rebuilt for each size over the receive buffer.
template <template <typename> class Algorithm>
squeeze::compare::Target glooTarget(const std::shared_ptr<gloo::Context>& context, const char* algo,
                                    const char* title) {
  auto current = std::make_shared<std::unique_ptr<gloo::Algorithm>>();
  squeeze::compare::Target t;
  t.algo = algo;
  t.title = title;
  t.outOfPlace = false;
  t.inPlace = true;
  t.setup = [context, current](size_t count, float* /*send*/, float* recv) {
    current->reset();  // free the previous size's scratch buffers first
    *current = std::make_unique<Algorithm<float>>(context, std::vector<float*>{recv},
                                                  static_cast<int>(count),
                                                  gloo::ReductionFunction<float>::sum);
  };
  t.call = [current](bool /*inPlace*/) { (*current)->run(); };
  return t;
}

int runGloo(int argc, char** argv) {
  static const squeeze::compare::DriverInfo kInfo = {
      .program = kProgram,
      .library = "gloo",
      .launchHint =
          "Several ranks: sqzrun -n 4 gloo-allreduce-perf --store DIR ... (or mpirun -np 4);\n"
          "GLOO_SOCKET_IFNAME picks the interface (default lo).\n",
      .algoHelp =
          "  -A, --algo <name>         ring, ring_chunked, halving_doubling, or all (one\n"
          "                            table section each; the default)\n",
      .algos = {"ring", "ring_chunked", "halving_doubling", "all"},
      .takesStore = true,
  };
  int rank = 0, nranks = 1;
  std::string envError;
  bool envOk = squeeze::compare::launcherRankAndSize(&rank, &nranks, &envError);
  squeeze::compare::Options o;
  o.algo = "all";
  int status = squeeze::compare::parseOptions(argc, argv, kInfo, rank == 0, &o);
  if (status >= 0) return status;
  if (!envOk) fail(kProgram, rank, envError);

  const bool all = o.algo == "all";
  if (nranks > 1) {
    struct stat st;
    if (o.store.empty())
      fail(kProgram, rank,
           "--store DIR is needed with " + std::to_string(nranks) +
               " ranks: an existing directory every rank sees (e.g. a fresh mktemp -d)");
    if (stat(o.store.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      fail(kProgram, rank, "--store " + o.store + ": not an existing directory; create it first");
  }

  const char* ifnameEnv = std::getenv("GLOO_SOCKET_IFNAME");
  const std::string ifname = ifnameEnv && *ifnameEnv ? ifnameEnv : "lo";
  std::string known;
  if (ipv4OfInterface(ifname, &known).empty())
    fail(kProgram, rank,
         "GLOO_SOCKET_IFNAME=" + ifname +
             ": no such interface with an IPv4 address (there are: " + known + ")");

  gloo::transport::tcp::attr attr;
  attr.iface = ifname;
  attr.ai_family = AF_INET;  // Gloo then binds to the interface's IPv4 address
  auto device = gloo::transport::tcp::CreateDevice(attr);

  std::unique_ptr<gloo::rendezvous::Store> base;
  if (nranks > 1)
    base = std::make_unique<gloo::rendezvous::FileStore>(o.store);
  else
    base = std::make_unique<gloo::rendezvous::HashStore>();
  gloo::rendezvous::PrefixStore store(jobPrefix(), *base);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
  context->connectFullMesh(store, device);

  GlooGroup group(context, store);
  std::vector<squeeze::compare::Target> targets;
  if (all || o.algo == "ring")
    targets.push_back(glooTarget<gloo::AllreduceRing>(context, "ring", "gloo::AllreduceRing"));
  if (all || o.algo == "ring_chunked")
    targets.push_back(glooTarget<gloo::AllreduceRingChunked>(context, "ring_chunked",
                                                             "gloo::AllreduceRingChunked"));
  if (all || o.algo == "halving_doubling")
    targets.push_back(glooTarget<gloo::AllreduceHalvingDoubling>(context, "halving_doubling",
                                                                 "gloo::AllreduceHalvingDoubling"));
  int result = squeeze::compare::runBenchmark(argc, argv, kInfo, o, group, targets, "tcp");
  targets.clear();
  // The closing barrier keeps a rank from closing its connections while another still reads the
  // benchmark's data. A peer that has passed it may close before this rank looked at its own
  // send to that peer, and gloo then fails the pair ("Connection closed by peer") although every
  // message of the barrier arrived: the results are printed and checked by then, and a peer that
  // really failed exits non-zero, which sqzrun reports.
  try {
    group.barrier();
  } catch (const std::exception& e) {
    if (!std::strstr(e.what(), "Connection closed by peer")) throw;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time, so progress shows
  int rank = 0, nranks = 1;
  std::string ignored;
  squeeze::compare::launcherRankAndSize(&rank, &nranks, &ignored);
  try {
    return runGloo(argc, argv);
  } catch (const std::exception& e) {
    std::string hint;
    if (std::strstr(e.what(), "File already exists"))
      hint =
          " (a store key of an earlier run with the same job id: use an empty --store directory)";
    else if (std::strstr(e.what(), "Wait timeout") || std::strstr(e.what(), "Timed out"))
      hint = " (did every rank start, with the same --store directory?)";
    fail(kProgram, rank, std::string("gloo: ") + e.what() + hint);
  }
}
