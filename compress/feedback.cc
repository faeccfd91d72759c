// The one error-feedback mechanism (codec.h, Codec::encodeFeedback): encode, decode the payload
// back, and add the difference to the residual of the same elements. The norms it computes on
// the way give the compression gain |C(x)|^2 / |x|^2 (GraVAC's delta). A device call decodes into
// device scratch and runs the same pass as a kernel (device/handle_kernels.h: the same residual
// and norm bits).
#include <vector>

#include "compress/codec.h"
#include "device/handle_kernels.h"
#include "squeeze_config.h"

namespace squeeze {

size_t Codec::encodeFeedback(const void* src, size_t count, DataType dtype, const ChunkInfo& at,
                             void* payload, float* residual, EncodeNorms* norms) {
  const size_t bytes = encode(src, count, dtype, at, payload);
#if SQZ_HAVE_CUDA
  if (at.stream) {
    auto* back = static_cast<float*>(
        device::gpuScratch(device::ScratchSlot::kDecoded, count * sizeof(float)));
    decode(payload, bytes, count, dtype, at, back);
    double inSq = 0, sentSq = 0;
    device::gpuFeedbackPass(static_cast<const float*>(src), back, count, residual, &inSq, &sentSq,
                            at.stream);
    if (norms) {
      norms->inputSq += inSq;
      norms->sentSq += sentSq;
    }
    return bytes;
  }
#endif
  thread_local std::vector<float> back;
  if (back.size() < count) back.resize(count);
  decode(payload, bytes, count, dtype, at, back.data());
  const float* __restrict x = static_cast<const float*>(src);
  const float* __restrict d = back.data();
  if (residual)
    for (size_t i = 0; i < count; ++i)
      residual[i] = device::residualAfter(residual[i], x[i], d[i]);
  // Norms in 8 float lanes per block of 1024 (vectorizes), blocks summed in double.
  constexpr size_t kBlock = device::kNormBlock;
  static_assert(device::kNormLanes == 8);
  double inSq = 0, sentSq = 0;
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t end = count - b < kBlock ? count : b + kBlock;
    float in8[8] = {}, sent8[8] = {};
    size_t i = b;
    for (; i + 8 <= end; i += 8)
      for (int l = 0; l < 8; ++l) {
        in8[l] = device::addSquare(in8[l], x[i + l]);
        sent8[l] = device::addSquare(sent8[l], d[i + l]);
      }
    for (; i < end; ++i) {
      in8[0] = device::addSquare(in8[0], x[i]);
      sent8[0] = device::addSquare(sent8[0], d[i]);
    }
    for (int l = 0; l < 8; ++l) {
      inSq += in8[l];
      sentSq += sent8[l];
    }
  }
  if (norms) {
    norms->inputSq += inSq;
    norms->sentSq += sentSq;
  }
  return bytes;
}

}  // namespace squeeze
