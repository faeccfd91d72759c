// perf-json-golden: the -J writer (perf/json_text.h, perf/perf_json.h) against files the hand-made
// writer it replaced wrote on the same inputs (tests/perf/golden/, captured before the switch to
// nlohmann/json), byte for byte: the squeeze-perf/1 preamble and rows with strings to escape,
// NaN, infinities, -0 and extreme doubles; an empty run; and sqz-train-sim's deeper layout.
// Three kinds of string are escaped differently by nlohmann (escape_edges_old.json has the old
// text): \b and \f as short escapes (the same string once read), and bytes that are not UTF-8 as
// one raw U+FFFD per bad sequence (the old writer wrote \ufffd per bad byte); no -J file of a
// real run holds either, and the last check pins what they are now. The rows' dense_calls came
// after the switch (added to perf.json by hand).
// Usage: json_golden_test GOLDEN_DIR. Prints PASS/FAIL per document; exits 1 on any failure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "perf/perf_json.h"

namespace {

using squeeze::perf::Json;
using squeeze::perf::JsonRow;
using squeeze::perf::JsonRunInfo;

int failures = 0;

// The environment the preamble's "env" reads: ours, secrets and escapes included.
void setEnv() {
  clearenv();
  setenv("PATH", "/usr/bin", 1);
  setenv("SQZ_ALGO", "allreduce:ring", 1);
  setenv("SQZ_SECRET", "s3cret", 1);
  setenv("SQZ_UNIQUE_ID", "abcdef", 1);
  setenv("SQZ_ZZ", "quote\" back\\ tab\t nl\n", 1);
  setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  setenv("OMPI_MCA_btl", "self,tcp", 1);
  setenv("SQZ_EMPTY", "", 1);
  setenv("SQZAX", "not ours", 1);
}

std::string perfDocument() {
  JsonRunInfo info;
  info.program = "sqz-allreduce-perf";
  info.collective = "allreduce";
  info.nranks = 2;
  info.hosts = {"host-a", "h\"o\\st \xc3\xa9"};
  info.transport = "tcp";
  static char a0[] = "sqz-allreduce-perf", a1[] = "-z", a2[] = "topk:ratio=0.01",
              a3[] =
                  "q\"b\\t\tn\nr\rc\x01\x1f"
                  "d\x7f"
                  "e\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
              a4[] = "-J", a5[] = "x.json";
  static char* argv[] = {a0, a1, a2, a3, a4, a5};
  info.argc = 6;
  info.argv = argv;
  info.started = 1700000000;
  std::vector<JsonRow> rows;
  JsonRow r;
  r.size = 1024;
  r.count = 256;
  r.type = "float";
  r.redop = "sum";
  r.root = -1;
  r.timeUs = 109.4085;
  r.algBw = 0.009359419057934255;
  r.busBw = 0.014039128586901383;
  r.wrong = 0;
  r.algo = "ring";
  rows.push_back(r);
  r.inPlace = true;
  r.timeUs = 124.74050000000001;
  r.algBw = 1e-7;
  r.busBw = 1e21;
  r.wrong = -1;
  r.algo = "ring/rhd";
  rows.push_back(r);
  r.inPlace = false;
  r.size = 18446744073709551615ull >> 1;
  r.count = 0;
  r.type = "bfloat16";
  r.redop = "none";
  r.root = 3;
  r.timeUs = NAN;
  r.algBw = INFINITY;
  r.busBw = -INFINITY;
  r.wrong = 12345;
  r.algo = "";
  rows.push_back(r);
  r.timeUs = -0.0;
  r.algBw = 0;
  r.busBw = 123456789.125;
  r.wrong = 0;
  r.algo = "a\"lg\\o";
  r.codec = "topk:ratio=0.01";
  r.wirePerRank = 1185792;
  r.ratio = 1.3264248704663213;
  r.relErr = 0.9920182184440248;
  r.denseCalls = 2;
  rows.push_back(r);
  r.codec = "fp16";
  r.wirePerRank = 0.1;
  r.ratio = NAN;
  r.relErr = 5e-324;
  r.denseCalls = 0;
  r.timeUs = 1.7976931348623157e308;
  r.algBw = 2.5e-5;
  r.busBw = 100.0;
  rows.push_back(r);
  return squeeze::perf::perfJsonText(info, rows);
}

std::string emptyDocument() {
  clearenv();
  JsonRunInfo info;
  info.program = "p";
  info.collective = "c";
  info.transport = nullptr;
  info.started = 0;
  return squeeze::perf::perfJsonText(info, {});
}

// sqz-train-sim's shape: three levels on lines, arrays of numbers inline.
std::string nestedDocument() {
  Json doc = Json::object();
  doc["format"] = "squeeze-train-sim/1";
  doc["settings"] = {{"model", "quadratic"}, {"params", 65536},
                     {"alpha", 0.5},         {"lr", 1.0},
                     {"target", 0.05},       {"initial_loss", 1234.5678901234}};
  doc["empty_obj"] = Json::object();
  doc["empty_arr"] = Json::array();
  doc["runs"] = Json::array();
  for (int k = 0; k < 2; ++k) {
    Json run = Json::object();
    run["spec"] = k ? "topk:ratio=0.01" : "dense";
    run["reached"] = k == 0;
    run["steps"] = -42;
    run["time_to_target_s"] = k ? NAN : 0.123;
    run["cf"] = Json::array();
    for (double v : {1.0, 100.0, 99.5, double(NAN), 1e-300, 3.0}) run["cf"].push_back(v);
    run["phase"] = Json::array();
    for (int v : {0, 1, 2}) run["phase"].push_back(double(v));
    run["none"] = Json::array();
    run["nested"] = Json::array({Json::array({1.0}), Json::object({{"x", nullptr}})});
    doc["runs"].push_back(std::move(run));
  }
  return squeeze::perf::jsonText(doc, 3);
}

std::string edgesDocument() {
  Json doc = Json::object();
  doc["backspace_formfeed"] = "a\bb\fc";
  doc["bad_lone"] = "x\xffy";
  doc["bad_truncated"] = "x\xe2\x82y";
  doc["bad_overlong"] = "x\xc0\x80y";
  doc["bad_surrogate"] = "x\xed\xa0\x80y";
  return squeeze::perf::jsonText(doc);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void expectSame(const char* name, const std::string& got, const std::string& want) {
  if (got == want) {
    std::printf("PASS %s (%zu bytes)\n", name, got.size());
    return;
  }
  ++failures;
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  size_t from = at > 40 ? at - 40 : 0;
  std::printf("FAIL %s: first difference at byte %zu of %zu (golden %zu)\n  new: %s\n  old: %s\n",
              name, at, got.size(), want.size(), got.substr(from, 100).c_str(),
              want.substr(from, 100).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s GOLDEN_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  setEnv();
  // The golden files end with the newline JsonFile::commit adds.
  expectSame("perf.json", perfDocument() + "\n", readFile(dir + "/perf.json"));
  expectSame("empty.json", emptyDocument() + "\n", readFile(dir + "/empty.json"));
  expectSame("nested.json", nestedDocument() + "\n", readFile(dir + "/nested.json"));
  // The strings nlohmann escapes its own way (see the top); the old text is
  // escape_edges_old.json's.
  expectSame("escape edges (nlohmann's)", edgesDocument(),
             "{\n"
             "  \"backspace_formfeed\": \"a\\bb\\fc\",\n"
             "  \"bad_lone\": \"x\xef\xbf\xbdy\",\n"
             "  \"bad_truncated\": \"x\xef\xbf\xbdy\",\n"
             "  \"bad_overlong\": \"x\xef\xbf\xbd\xef\xbf\xbdy\",\n"
             "  \"bad_surrogate\": \"x\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdy\"\n"
             "}");
  return failures ? 1 : 0;
}
