// sqz-train-sim's synthetic models (see train_sim.cc): what a rank's gradient and the loss are at
// given weights. Data comes from counter-based hashes, so every run is reproducible.
//  - quadratic: loss(w) = 0.5 sum_i h_i (w_i - w*_i)^2, h_i = (1 + k_i)^-0.5 with k a stride
//    permutation of 0..n-1, so every chunk of the tensor mixes large and small curvatures.
//    alpha = 0.5 is the steep end of the usual 0.5-1: dense SGD's steps to a fixed fraction of
//    the initial loss grow as n^alpha (about 900 steps to 5% at n = 1M, lr 1), and alpha 0.75
//    would need ~20k. Each rank's gradient is h (w - w*) plus noise of std
//    V / sqrt(1 + t/D) * rms(true gradient), independent per rank, step and element. w starts at 0.
//  - softmax: tests/collective/convergence_test.cc's problem (documents of 16 tokens, 32 classes,
//    24 keywords per class at p = 0.15) with PARAMS/32 features; batches of 32 per rank from the
//    rank's own shard; the loss is the mean cross-entropy on 2048 held-out documents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace squeeze::perf {

inline constexpr double kAlpha = 0.5;  // quadratic: curvature spectrum exponent
inline constexpr int kClasses = 32;    // softmax: classes (and parameters per feature)
inline constexpr int kBatch = 32,
                     kEvalDocs = 2048;  // softmax: documents per step and rank, held out

/// What a model is built from (the flags -m -p -V -D -S).
struct ModelSettings {
  bool softmax = false;
  size_t params = 1u << 20;
  double noise = 0.5, decay = 0;  // quadratic only
  long seed = 1;
};

class Model {
 public:
  virtual ~Model() = default;
  size_t size() const { return n_; }
  // This rank's gradient at w for `step` (0-based) into g.
  virtual void gradient(const float* w, long step, float* g) = 0;
  // The loss at w (the same on every rank holding the same w).
  virtual double loss(const float* w) const = 0;

 protected:
  size_t n_ = 0;
};

/// The quadratic or the softmax model of rank `rank`.
std::unique_ptr<Model> makeModel(const ModelSettings& s, int rank);

}  // namespace squeeze::perf
