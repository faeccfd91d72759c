// Accordion's state machine (see accordion.h) and the saved form of its fields.
#include "compress/accordion.h"

#include <cmath>

#include "base/error.h"
#include "compress/state_bytes.h"

namespace squeeze {
namespace {

constexpr uint32_t kAccordionMagic = 0x44524341;  // "ACRD"

}  // namespace

double AccordionPolicy::step(double gradNorm) {
  const double cfNow = cf();  // this call runs at the level the last interval chose
  normSum_ += gradNorm;
  if (++calls_ == p_.interval) {
    const double mean = normSum_ / double(p_.interval);
    if (previousMean_ > 0)
      critical_ = std::fabs(previousMean_ - mean) / previousMean_ >= p_.eta;
    previousMean_ = mean > 0 ? mean : previousMean_;
    calls_ = 0;
    normSum_ = 0;
  }
  return cfNow;
}

std::vector<char> AccordionPolicy::save() const {
  std::vector<char> out;
  StateWriter w{out};
  w.pod(kAccordionMagic);
  w.pod(static_cast<uint32_t>(critical_));
  w.pod(calls_);
  w.pod(normSum_);
  w.pod(previousMean_);
  return out;
}

void AccordionPolicy::load(const char* data, size_t bytes) {
  StateReader r{data, bytes};
  AccordionPolicy next = *this;
  const uint32_t magic = r.pod<uint32_t>();
  const uint32_t critical = r.pod<uint32_t>();
  next.calls_ = r.pod<uint64_t>();
  next.normSum_ = r.pod<double>();
  next.previousMean_ = r.pod<double>();
  if (magic != kAccordionMagic || critical > 1 || next.calls_ >= p_.interval || r.left != 0)
    raise(ErrorCode::kInvalidArgument, "codec state: the accordion section does not fit this "
          "codec (interval ", p_.interval, "); load it into a codec created from the same spec.");
  next.critical_ = critical != 0;
  *this = next;
}

}  // namespace squeeze
