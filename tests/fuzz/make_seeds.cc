// Writes the hand-made seed inputs of every fuzz target: valid headers, real payloads of every
// codec setting the `codec` target picks, real saved codec states, spec strings and SQZ_*
// settings, real unique ids, and valid handshake, rendezvous and setup messages, each in the
// input layout its target's header comment describes. Usage: make_seeds OUTDIR; it writes
// OUTDIR/TARGET/seed-NAME (tests/fuzz/corpus/ holds them, plus what fuzzing found).
#include <netinet/in.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/params.h"
#include "base/wire.h"
#include "bootstrap/unique_id.h"
#include "compress/codecs.h"
#include "tests/fuzz/codec_specs.h"
#include "tests/fuzz/header_case.h"
#include "tests/fuzz/state_codecs.h"

using namespace squeeze;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

fs::path gOut;
size_t gWritten = 0;

void write(const std::string& target, const std::string& name, const Bytes& b) {
  const fs::path dir = gOut / target;
  fs::create_directories(dir);
  std::ofstream f(dir / ("seed-" + name), std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) {
    std::fprintf(stderr, "make_seeds: cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
  ++gWritten;
}

template <class T>
void put(Bytes& b, const T& v) {
  uint8_t raw[sizeof v];
  std::memcpy(raw, &v, sizeof v);
  for (uint8_t byte : raw) b.push_back(byte);
}
void putText(Bytes& b, const std::string& s) { b.insert(b.end(), s.begin(), s.end()); }

// ---- header: u16 coll pick, codec, method, dtype, op, srcRank - 1; WireHeader; u64 capacity;
// i32 myRank (fuzz_header.cc) ----
void headerSeeds() {
  struct Variant {
    const char* name;
    void (*change)(WireHeader&);
  };
  const Variant variants[] = {
      {"valid", [](WireHeader&) {}},
      {"magic", [](WireHeader& h) { h.magic = 0; }},
      {"version", [](WireHeader& h) { h.version = 1; }},
      {"commhash", [](WireHeader& h) { h.commHash ^= 1; }},
      {"srcrank", [](WireHeader& h) { h.srcRank = 5; }},
      {"seq", [](WireHeader& h) { h.seq = 41; }},
      {"count", [](WireHeader& h) { h.count = 999; }},
      {"dtype", [](WireHeader& h) { h.dtype = 200; }},
      {"op", [](WireHeader& h) { h.op = 9; }},
      {"coll", [](WireHeader& h) { h.coll = 0; }},
      {"codec", [](WireHeader& h) { h.codec = 77; }},
      {"spechash", [](WireHeader& h) { h.specHash = 1; }},
      {"step", [](WireHeader& h) { h.step = 4; }},
      {"offset", [](WireHeader& h) { h.offset = 0; }},
      {"payload", [](WireHeader& h) { h.payloadBytes = 1u << 20; }},
  };
  for (const Variant& v : variants) {
    // The expected side's bytes (allreduce, codec 7, method 10, dtype 7, op 0, rank 1) and the
    // header fuzz_header.cc expects for them, changed in one field.
    Bytes b;
    put(b, uint16_t{0});
    for (uint8_t x : {uint8_t{7}, uint8_t{10}, uint8_t{7}, uint8_t{0}, uint8_t{0}}) put(b, x);
    fuzz::Input prefix(b.data(), b.size());
    WireHeader h = fuzz::expectedHeader(prefix);
    h.payloadBytes = 4000;
    v.change(h);
    put(b, h);
    put(b, uint64_t{4096});
    put(b, int32_t{0});
    write("header", v.name, b);
  }
}

// ---- codec: method, settings, u16 count, dtype, op, u32 offset, u64 call, rank, peer, pattern,
// payload (fuzz_codec.cc) ----
std::vector<float> gradient(size_t n, int variant) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = std::sin(0.37f * float(i) + float(variant)) * (i % 5 == 0 ? 3.0f : 0.1f);
  return x;
}

Bytes codecInput(size_t method, size_t setting, size_t count, DataType dtype, RedOp op,
                 const ChunkInfo& at, const Bytes& payload) {
  Bytes b;
  put(b, uint8_t(method));
  put(b, uint8_t(setting));
  put(b, uint16_t(count));
  put(b, uint8_t(dtype));
  put(b, uint8_t(op));
  put(b, uint32_t(at.offset));
  put(b, uint64_t(at.call));
  put(b, uint8_t(at.rank));
  put(b, uint8_t(at.peer));
  put(b, uint8_t(1));  // local chunk: a ramp
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

void codecSeeds() {
  const auto& table = fuzz::codecSpecs();
  for (size_t m = 0; m < table.size(); ++m)
    for (size_t s = 0; s < table[m].size(); ++s)
      for (size_t count : {size_t(37), fuzz::kMaxCodecCount}) {
        const CodecSpec spec = CodecSpec::parse(table[m][s]);
        auto handle = createCodecHandle(spec, count, DataType::kFloat32);
        Codec& codec = *handle->chunkCodec();
        const ChunkInfo at{count * 3, 11, 2, 1};
        const std::vector<float> x = gradient(count, int(s));
        Bytes payload(codec.maxEncodedBytes(count, DataType::kFloat32));
        payload.resize(codec.encode(x.data(), count, DataType::kFloat32, at, payload.data()));
        write("codec", strCat(spec.method, "-", s, "-", count),
              codecInput(m, s, count, DataType::kFloat32, RedOp::kSum, at, payload));
      }
  // dense in every datatype and op
  for (int t = 0; t < kNumDataTypes; ++t) {
    const DataType dtype = static_cast<DataType>(t);
    const size_t count = 37;
    Bytes payload(count * dataTypeSize(dtype));
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 5 + 1);
    write("codec", strCat("dense-", dataTypeName(dtype)),
          codecInput(0, 0, count, dtype, static_cast<RedOp>(t % kNumRedOps), ChunkInfo{0, 0, 0, 1},
                     payload));
  }
  // PowerSGD's factors with NaN and zero columns (the input's tail is P then Q)
  {
    std::vector<float> pq(64, 0.0f);
    pq[1] = NAN;
    pq[9] = INFINITY;
    Bytes payload(pq.size() * 4);
    std::memcpy(payload.data(), pq.data(), payload.size());
    write("codec", "powersgd-nan-factors",
          codecInput(11, 0, 37, DataType::kFloat32, RedOp::kSum, ChunkInfo{0, 0, 0, 1}, payload));
  }
}

// ---- state: codec index, then a saved state (fuzz_state.cc) ----
void stateSeeds() {
  setenv("SQZ_SOCKET_IFNAME", "lo", 0);
  sqzUniqueId id;
  sqzComm_t comm = nullptr;
  if (sqzGetUniqueId(&id) != sqzSuccess || sqzCommInitRank(&comm, 1, id, 0) != sqzSuccess) {
    std::fprintf(stderr, "make_seeds: no 1-rank communicator: %s\n", sqzGetLastError(nullptr));
    std::exit(1);
  }
  const size_t n = fuzz::kStateCount;
  for (size_t i = 0; i < fuzz::kNumStateCodecs; ++i) {
    const auto& c = fuzz::kStateCodecs[i];
    sqzCodec_t codec = nullptr;
    std::vector<float> in = gradient(n, int(i)), out(n);
    std::vector<int32_t> ints(n, 3), intsOut(n);
    const bool isFloat = c.dtype == sqzFloat32;
    if (sqzCodecCreate(&codec, c.spec, n, c.dtype, comm) != sqzSuccess ||
        sqzAllReduceCompressed(isFloat ? (void*)in.data() : (void*)ints.data(),
                               isFloat ? (void*)out.data() : (void*)intsOut.data(), n, c.dtype,
                               sqzSum, codec, comm, nullptr) != sqzSuccess) {
      std::fprintf(stderr, "make_seeds: %s: %s\n", c.spec, sqzGetLastError(comm));
      std::exit(1);
    }
    size_t bytes = 0;
    sqzCodecSaveState(codec, nullptr, &bytes);
    Bytes b(1 + bytes);
    b[0] = uint8_t(i);
    sqzCodecSaveState(codec, b.data() + 1, &bytes);
    write("state", strCat(i, "-", c.spec), b);
    sqzCodecDestroy(codec);
  }
  sqzCommDestroy(comm);
}

// ---- spec: even byte, u16 count, codec spec text | odd byte, lines of key byte + value ----
void specSeeds() {
  const char* specs[] = {"dense",
                         "fp16",
                         "bf16",
                         "int8:block=128",
                         "qsgd:levels=16,block=512,seed=3",
                         "onebit:block=256",
                         "terngrad:seed=1",
                         "topk:ratio=0.001,sample=1",
                         "randk:ratio=0.01,seed=9",
                         "threshold:threshold=0.01",
                         "dgc:ratio=0.001,momentum=0.9,clip=5,warmup=200,sample=1",
                         "powersgd:rank=4,cols=64,seed=2",
                         "topk:ratio=0.1,ef=0,min_bytes=64K",
                         " qsgd : levels = 4 , block = 64 "};
  int i = 0;
  for (const char* s : specs) {
    Bytes b;
    put(b, uint8_t(0));
    put(b, uint16_t(64));
    putText(b, s);
    write("spec", strCat("codec-", i++), b);
  }
  const auto& table = paramTable();
  Bytes all;
  put(all, uint8_t(1));
  for (size_t k = 0; k < table.size(); ++k) {
    Bytes b;
    put(b, uint8_t(1));
    std::string value = table[k].defaultValue;
    const std::string key = table[k].key;
    if (key == "SQZ_ALGO") value = "allreduce:0-64K=rhd,64K-inf=ring;broadcast:ring";
    put(b, uint8_t(k));
    putText(b, value + "\n");
    write("spec", strCat("param-", key), b);
    put(all, uint8_t(k));
    putText(all, value + "\n");
  }
  write("spec", "param-all", all);
}

// ---- uniqueid: flag byte (odd: fix the checksum), 128 bytes ----
void uniqueIdSeeds() {
  std::string err;
  for (const char* addr : {"127.0.0.1:29500", "[::1]:4242"}) {
    UniqueIdData id = UniqueIdData::create(*SockAddr::parse(addr, &err));
    char bytes[UniqueIdData::kBytes];
    id.serialize(bytes);
    for (uint8_t flag : {uint8_t{0}, uint8_t{1}}) {
      Bytes b;
      put(b, flag);
      b.insert(b.end(), bytes, bytes + sizeof bytes);
      write("uniqueid", strCat(addr[0] == '[' ? "v6" : "v4", "-", int(flag)), b);
    }
  }
}

// ---- bootstrap: mode byte, then per mode (fuzz_bootstrap.cc); zeros XOR a valid message ----
void bootstrapSeeds() {
  {
    Bytes b = {0, 1};  // a signed hello
    Bytes hello(72, 0);
    const uint64_t commHash = 0x1234;
    std::memcpy(hello.data() + 8, &commHash, 8);
    hello[16] = 3;  // rank
    hello[20] = 2;  // purpose: control
    b.insert(b.end(), hello.begin(), hello.end());
    write("bootstrap", "hello-signed", b);
    b[1] = 0;
    write("bootstrap", "hello-unsigned", b);
  }
  for (uint8_t nranks = 0; nranks < 4; ++nranks) {
    Bytes b = {1, nranks, 0, 0, 0};  // valid reply, not cut
    write("bootstrap", strCat("reply-", nranks + 1), b);
  }
  write("bootstrap", "reply-cut", Bytes{1, 1, 1, 0x10, 0x80});
  write("bootstrap", "request-1", Bytes{2});
  write("bootstrap", "request-3", Bytes{2, 2});  // nranks 1 ^ 2 = 3, rank 0
  write("bootstrap", "request-bad", Bytes{2, 0, 0, 0, 0x80});
  write("bootstrap", "tcp-2", Bytes{3, 2, 0, 0, 0});
  write("bootstrap", "tcp-99", Bytes{3, 99, 0, 0, 0});
  write("bootstrap", "shm-low", Bytes{4, 3});
  write("bootstrap", "shm-high", Bytes{4, 6, 2});  // a 3-page segment: rings of 4096 bytes
  // Open issue shm-ring-size-overflow: rings of 2^63 bytes (4096 ^ 0x1000 ^ 1 << 63) in a
  // one-page segment; 2 * 2^63 wraps to 0, so the size check passes.
  Bytes big = {4, 6, 0};
  big.resize(3 + 40, 0);
  big[3 + 33] = 0x10;
  big[3 + 39] = 0x80;
  write("bootstrap", "shm-high-ringbytes-overflow", big);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR   (writes OUTDIR/TARGET/seed-NAME)\n", argv[0]);
    return 2;
  }
  gOut = argv[1];
  setenv("SQZ_DEBUG", "NONE", 0);
  headerSeeds();
  codecSeeds();
  stateSeeds();
  specSeeds();
  uniqueIdSeeds();
  bootstrapSeeds();
  std::printf("wrote %zu seeds under %s\n", gWritten, gOut.c_str());
  return 0;
}
