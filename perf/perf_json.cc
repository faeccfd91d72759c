// The squeeze-perf/1 preamble and rows; see perf_json.h.
#include "perf_json.h"

#include <unistd.h>

#include <algorithm>
#include <string_view>
#include <utility>

namespace squeeze::perf {

std::string hostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) return "?";
  return host;
}

Json jsonPreamble(const JsonRunInfo& info) {
  Json doc = Json::object();
  doc["format"] = info.format;
  doc["library"] = info.library;
  doc["program"] = info.program;
  doc["collective"] = info.collective;
  doc["nranks"] = info.nranks;
  doc["hosts"] = Json::array();
  for (const std::string& h : info.hosts) doc["hosts"].push_back(h);
  doc["transport"] = stringOrNull(info.transport);
  std::string command;
  for (int i = 0; i < info.argc; ++i) {
    if (i) command += ' ';
    command += info.argv[i];
  }
  doc["command"] = command;
  char date[32] = "";
  std::tm tm{};
  if (gmtime_r(&info.started, &tm)) std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  doc["date"] = stringOrNull(date[0] ? date : nullptr);

  std::vector<std::pair<std::string, std::string>> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string name(entry.substr(0, eq));
    if (name.rfind("SQZ_", 0) != 0 && name.rfind("GLOO_", 0) != 0 &&
        name.rfind("OMPI_MCA_", 0) != 0)
      continue;
    bool secret = name == "SQZ_UNIQUE_ID" || name == "SQZ_SECRET";
    vars.emplace_back(name, secret ? "(set, hidden)" : std::string(entry.substr(eq + 1)));
  }
  std::sort(vars.begin(), vars.end());
  Json env = Json::object();
  for (const auto& [name, value] : vars) env[name] = value;
  doc["env"] = std::move(env);
  return doc;
}

Json jsonRows(const std::vector<JsonRow>& rows) {
  Json out = Json::array();
  for (const JsonRow& row : rows) {
    Json r = Json::object();
    r["size"] = static_cast<int64_t>(row.size);
    r["count"] = static_cast<int64_t>(row.count);
    r["type"] = row.type;
    r["redop"] = row.redop;
    r["root"] = row.root;
    r["inplace"] = row.inPlace;
    r["time_us"] = row.timeUs;
    r["algbw"] = row.algBw;
    r["busbw"] = row.busBw;
    r["wrong"] = row.wrong >= 0 ? Json(row.wrong) : Json(nullptr);
    r["algo"] = row.algo;
    r["codec"] = stringOrNull(row.codec);
    r["wire_per_rank"] = row.wirePerRank;  // NaN: null
    r["ratio"] = row.ratio;
    r["relerr"] = row.relErr;
    r["dense_calls"] = row.denseCalls >= 0 ? Json(row.denseCalls) : Json(nullptr);
    out.push_back(std::move(r));
  }
  return out;
}

std::string perfJsonText(const JsonRunInfo& info, const std::vector<JsonRow>& rows) {
  Json doc = jsonPreamble(info);
  doc["rows"] = jsonRows(rows);
  return jsonText(doc);
}

}  // namespace squeeze::perf
