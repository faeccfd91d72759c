// The attacker's tally, printed at the end (see tally.h).
#include "tally.h"

#include <algorithm>
#include <cstdio>

namespace squeeze::attack {

void Tally::print() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int k = 0; k < kNumKinds; ++k) {
    std::printf("sqz-attacker: kind %-12s attempts %6ld connected %6ld ports %4zu\n", kKindNames[k],
                attempts_[k], connected_[k], ports_[k].size());
    for (const auto& [what, o] : outcomes_[k]) {
      std::printf("sqz-attacker:   %-12s %-28s %6ld%s%s\n", kKindNames[k], what.c_str(), o.count,
                  o.example.empty() ? "" : "  e.g. ", o.example.c_str());
    }
    std::vector<double>& d = dropSeconds_[k];
    if (!d.empty()) {
      std::sort(d.begin(), d.end());
      std::printf(
          "sqz-attacker:   %-12s server closed it after      min %.2f s, median %.2f s, "
          "max %.2f s (%zu connections)\n",
          kKindNames[k], d.front(), d[d.size() / 2], d.back(), d.size());
    }
  }
  std::fflush(stdout);
}

}  // namespace squeeze::attack
