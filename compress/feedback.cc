// The one error-feedback mechanism (codec.h, Codec::encodeFeedback): encode, decode the payload
// back, and add the difference to the residual of the same elements. The norms it computes on
// the way give the compression gain |C(x)|^2 / |x|^2 (GraVAC's delta). The decode lands in the
// context's scratch, and the pass is its feedbackPass (device/handle_kernels.h: on a GPU the same
// residual and norm bits as on the host).
#include "compress/codec.h"

namespace squeeze {

size_t Codec::encodeFeedback(const void* src, size_t count, DataType dtype, const ChunkInfo& at,
                             void* payload, float* residual, EncodeNorms* norms) {
  const size_t bytes = encode(src, count, dtype, at, payload);
  auto* back = reinterpret_cast<float*>(
      at.ctx->scratch(device::Context::Slot::kDecoded, count * sizeof(float)));
  decode(payload, bytes, count, dtype, at, back);
  // The norms go straight to *norms: on a GPU they arrive when the context next waits.
  at.ctx->feedbackPass(static_cast<const float*>(src), back, count, residual,
                       norms ? &norms->inputSq : nullptr, norms ? &norms->sentSq : nullptr);
  return bytes;
}

}  // namespace squeeze
