// The one error-feedback mechanism (codec.h, Codec::encodeFeedback): encode, decode the payload
// back, and add the difference to the residual of the same elements. The norms it computes on
// the way give the compression gain |C(x)|^2 / |x|^2 (GraVAC's delta).
#include <vector>

#include "compress/codec.h"

namespace squeeze {

size_t Codec::encodeFeedback(const void* src, size_t count, DataType dtype, const ChunkInfo& at,
                             void* payload, float* residual, EncodeNorms* norms) {
  const size_t bytes = encode(src, count, dtype, at, payload);
  thread_local std::vector<float> back;
  if (back.size() < count) back.resize(count);
  decode(payload, bytes, count, dtype, at, back.data());
  const float* x = static_cast<const float*>(src);
  double inSq = 0, sentSq = 0;
  for (size_t i = 0; i < count; ++i) {
    inSq += double(x[i]) * x[i];
    sentSq += double(back[i]) * back[i];
    if (residual) residual[i] += x[i] - back[i];
  }
  if (norms) {
    norms->inputSq += inSq;
    norms->sentSq += sentSq;
  }
  return bytes;
}

}  // namespace squeeze
