// sqz-train-sim's models; see train_sim_model.h.
#include "train_sim_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "inputs.h"

namespace squeeze::perf {
namespace {

constexpr int kTokens = 16, kKeywords = 24, kKeywordPerMille = 150;
constexpr uint64_t kDocsPerRank = 16384;

// Not inputs.h's elementHash: the models' draws have always come from this chain of mixes, and
// another hash would change every run's numbers.
uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) { return mix64(mix64(mix64(a) ^ b) ^ c); }

// Roughly standard normal from one hash: the sum of its four 16-bit uniforms (Irwin-Hall),
// centred and scaled to unit variance; one mix per value keeps the noise pass cheap. The same
// draw as gradientFromHashes' (inputs.cc) but rounded differently, so not shared: runs keep
// their numbers.
float gaussish(uint64_t h) {
  double s =
      double(h & 0xffff) + double(h >> 16 & 0xffff) + double(h >> 32 & 0xffff) + double(h >> 48);
  return float((s - 131070.0) * (1.7320508075688772 / 65536.0));
}

class Quadratic : public Model {
 public:
  Quadratic(const ModelSettings& settings, int rank)
      : settings_(settings), rank_(rank), h_(settings.params), wstar_(settings.params) {
    n_ = settings.params;
    // k_i = i * stride mod n, stride coprime with n near n / golden ratio: a permutation that
    // puts far-apart ranks of the spectrum next to each other.
    uint64_t stride = std::max<uint64_t>(1, uint64_t(double(n_) * 0.6180339887));
    while (std::gcd(stride, uint64_t(n_)) != 1) ++stride;
    for (size_t i = 0; i < n_; ++i) {
      h_[i] = float(std::pow(1.0 + double(i * stride % n_), -kAlpha));
      wstar_[i] = gaussish(hash3(uint64_t(settings.seed), 1, i));
    }
  }
  void gradient(const float* w, long step, float* g) override {
    double sq = 0;
    for (size_t i = 0; i < n_; ++i) {
      g[i] = h_[i] * (w[i] - wstar_[i]);
      sq += double(g[i]) * g[i];
    }
    double std = settings_.noise * std::sqrt(sq / double(n_));
    if (settings_.decay > 0) std /= std::sqrt(1.0 + double(step) / settings_.decay);
    if (std == 0) return;
    const uint64_t base =
        hash3(uint64_t(settings_.seed), 2, uint64_t(rank_) << 40 | uint64_t(step));
    const float s = float(std);
    for (size_t i = 0; i < n_; ++i) g[i] += s * gaussish(mix64(base + i));
  }
  double loss(const float* w) const override {
    double sum = 0;
    for (size_t i = 0; i < n_; ++i) {
      double d = double(w[i]) - wstar_[i];
      sum += h_[i] * d * d;
    }
    return 0.5 * sum;
  }

 private:
  const ModelSettings settings_;
  int rank_;
  std::vector<float> h_, wstar_;
};

class Softmax : public Model {
 public:
  Softmax(const ModelSettings& settings, int rank)
      : seed_(uint64_t(settings.seed)), rank_(rank), features_(settings.params / kClasses) {
    n_ = features_ * kClasses + kClasses;
    for (int k = 0; k < kClasses * kKeywords; ++k)
      keywords_.push_back(uint32_t(hash3(seed_, 3, uint64_t(k)) % features_));
    // Held-out documents come from ids no shard uses, whatever the rank count.
    for (int d = 0; d < kEvalDocs; ++d) makeDoc((uint64_t(1) << 40) + uint64_t(d), &eval_);
  }
  void gradient(const float* w, long step, float* g) override {
    std::fill(g, g + n_, 0.0f);
    batch_.labels.clear();
    batch_.tokens.clear();
    for (int s = 0; s < kBatch; ++s) {
      uint64_t pick = hash3(seed_, 4, uint64_t(rank_) << 40 | uint64_t(step) << 8 | uint64_t(s));
      makeDoc(uint64_t(rank_) * kDocsPerRank + pick % kDocsPerRank, &batch_);
    }
    lossAndGrad(batch_, w, g);
  }
  double loss(const float* w) const override { return lossAndGrad(eval_, w, nullptr); }

 private:
  struct Docs {
    std::vector<uint32_t> tokens;  // kTokens per document
    std::vector<uint8_t> labels;
  };
  // Document `id`: a label, and tokens that are one of its class's keywords with p = 0.15, else
  // a uniform feature, so the classes overlap and the loss has a floor.
  void makeDoc(uint64_t id, Docs* d) const {
    const int label = int(hash3(seed_, 5, id) % kClasses);
    d->labels.push_back(uint8_t(label));
    for (int t = 0; t < kTokens; ++t) {
      const uint64_t h = hash3(seed_, 6, id << 4 | uint64_t(t));
      const uint64_t pick = h >> 20;
      d->tokens.push_back(h % 1000 < kKeywordPerMille
                              ? keywords_[label * kKeywords + pick % kKeywords]
                              : uint32_t(pick % features_));
    }
  }
  // Mean cross-entropy of softmax(x W + b) over d; adds its gradient to grad unless null.
  // w = W (features x classes, row-major) then b.
  double lossAndGrad(const Docs& d, const float* w, float* grad) const {
    const float* b = w + features_ * kClasses;
    const size_t n = d.labels.size();
    double loss = 0;
    float z[kClasses], dz[kClasses];
    for (size_t s = 0; s < n; ++s) {
      const uint32_t* tok = &d.tokens[s * kTokens];
      std::copy(b, b + kClasses, z);
      for (int t = 0; t < kTokens; ++t)
        for (int c = 0; c < kClasses; ++c) z[c] += w[size_t(tok[t]) * kClasses + c];
      const float mx = *std::max_element(z, z + kClasses);
      double sum = 0;
      for (int c = 0; c < kClasses; ++c) sum += std::exp(double(z[c] - mx));
      const int y = d.labels[s];
      loss += std::log(sum) - double(z[y] - mx);
      if (!grad) continue;
      for (int c = 0; c < kClasses; ++c)
        dz[c] = float((std::exp(double(z[c] - mx)) / sum - (c == y)) / double(n));
      for (int t = 0; t < kTokens; ++t)
        for (int c = 0; c < kClasses; ++c) grad[size_t(tok[t]) * kClasses + c] += dz[c];
      for (int c = 0; c < kClasses; ++c) grad[features_ * kClasses + c] += dz[c];
    }
    return loss / double(n);
  }

  uint64_t seed_;
  int rank_;
  size_t features_;
  std::vector<uint32_t> keywords_;
  Docs eval_, batch_;
};

}  // namespace

std::unique_ptr<Model> makeModel(const ModelSettings& s, int rank) {
  if (s.softmax) return std::make_unique<Softmax>(s, rank);
  return std::make_unique<Quadratic>(s, rank);
}

}  // namespace squeeze::perf
