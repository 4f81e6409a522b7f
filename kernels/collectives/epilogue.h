// all_reduce with a fused epilogue over rows, for the layer boundaries of tensor-parallel models (the
// row-parallel projection's partial sums, then the residual add and the next RMSNorm), on the 1PA-LL protocol
// (all_reduce_1pa_ll.cu). Raw pointers, no XLA types; sums only; f32, bf16 and f16.
//
//   kResidual:         new_residual = residual + sum_ranks(x)
//   kResidualRMSNorm:  new_residual as above; normed = new_residual * rsqrt(mean(new_residual^2) + eps) * weight
//                      (mean over each row of `row` elements, in f32; weight has `row` elements)
// The rank sum is rounded to the element type before the residual add, and new_residual before the norm, as
// the unfused composition rounds them. Every buffer is 16-byte aligned.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "collectives/collective.h"

namespace jax_mscclpp {

enum class Epilogue : int32_t { kResidual = 0, kResidualRMSNorm = 1 };

// The name jax_mscclpp.fused gives the epilogue (its functions are all_reduce_<name>), for messages.
inline const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::kResidual: return "residual";
    case Epilogue::kResidualRMSNorm: return "residual_rmsnorm";
    default: return "unknown";
  }
}

struct EpilogueCall {
  const void* x;         // [count] this rank's partial sums
  const void* residual;  // [count]
  const void* weight;    // [row] (kResidualRMSNorm)
  void* new_residual;    // [count]
  void* normed;          // [count] (kResidualRMSNorm)
  uint64_t count;        // elements; a multiple of row
  uint64_t row;          // elements per row
  float eps;
};

namespace collectives {
constexpr int kMaxEpilogueBlocks = 128;
constexpr uint64_t kMaxEpilogueRowBytes = 1024 * 4 * 16;  // 1024 threads x 4 vectors of 16 bytes
}  // namespace collectives

// Whether the fused kernel runs this call: a float dtype, rows of 16-byte multiples up to kMaxEpilogueRowBytes,
// and a message that fits one LL half's slots (the same bound as one 1PA-LL piece).
bool epilogue_supported(int nranks, uint64_t count, uint64_t row, int32_t dtype, uint64_t scratch_bytes);

// One launch (one epoch). cudaErrorInvalidValue when !epilogue_supported.
cudaError_t launch_all_reduce_epilogue(const CollectiveContext& ctx, Epilogue epilogue, const EpilogueCall& call,
                                       int32_t dtype, cudaStream_t stream);

}  // namespace jax_mscclpp
