// The attack kinds and the tally the attacker prints at the end: per kind, attempts,
// connections made, distinct ports, named outcomes with an example, and how long the server
// kept connections open. Shared by the main loop and the worker threads.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "listeners.h"

namespace squeeze::attack {

enum Kind { kScan, kGarbage, kWrongSecret, kHalfOpen, kSlowClient, kNumKinds };
constexpr const char* kKindNames[kNumKinds] = {"scan", "garbage", "wrong-secret", "half-open",
                                               "slow-client"};

// Counters shared by the main loop and the worker threads.
class Tally {
 public:
  void attempt(Kind k) {
    std::lock_guard<std::mutex> lock(mu_);
    ++attempts_[k];
  }
  void connected(Kind k, const Target& t) {
    std::lock_guard<std::mutex> lock(mu_);
    ++connected_[k];
    ports_[k].insert(t);
  }
  // A named outcome of one attack ("refused", "server closed", ...), with an example message.
  void outcome(Kind k, const std::string& what, const std::string& example = "") {
    std::lock_guard<std::mutex> lock(mu_);
    auto& o = outcomes_[k][what];
    ++o.count;
    if (o.example.empty()) o.example = example;
  }
  // How long the server kept a connection of kind k before closing it.
  void serverDropped(Kind k, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    dropSeconds_[k].push_back(seconds);
  }
  long count(Kind k, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = outcomes_[k].find(what);
    return it == outcomes_[k].end() ? 0 : it->second.count;
  }

  // Per kind: attempts, connections, distinct ports, each outcome with an example, and how
  // long the server kept its connections.
  void print();

 private:
  struct Outcome {
    long count = 0;
    std::string example;
  };
  std::mutex mu_;
  long attempts_[kNumKinds] = {};
  long connected_[kNumKinds] = {};
  std::set<Target> ports_[kNumKinds];
  std::map<std::string, Outcome> outcomes_[kNumKinds];
  std::vector<double> dropSeconds_[kNumKinds];
};

}  // namespace squeeze::attack
