// poison_outputs_if_failed (collective.h): the outputs of a call on a rank whose kernels stopped on a failure.
#include "collectives/collective.h"
#include "jax_mscclpp/atomics.cuh"
#include "jax_mscclpp/call_inbox.cuh"

namespace jax_mscclpp {
namespace {

constexpr int kPoisonThreads = 256;
constexpr uint64_t kPoisonMaxBlocks = 1024;

// Every thread reads the rank's failed word (set before a failed kernel ends: error_record.cuh, record_failure);
// unset, the kernel ends at once. `vector`: `out` is 16-byte aligned, its 16-byte words are set by vector stores.
__global__ void __launch_bounds__(kPoisonThreads) poison_if_failed_kernel(const uint64_t* failed, char* out,
                                                                          uint64_t bytes, bool vector) {
  if (load_relaxed_sys(failed) == 0) return;
  const uint64_t first = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t words = vector ? bytes / 16 : 0;
  for (uint64_t i = first; i < words; i += stride) reinterpret_cast<uint4*>(out)[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
  for (uint64_t i = words * 16 + first; i < bytes; i += stride) out[i] = static_cast<char>(0xFF);
}

}  // namespace

cudaError_t load_poison_kernel() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, poison_if_failed_kernel);  // loads the function (CUDA's lazy loading)
}

cudaError_t poison_outputs_if_failed(const CollectiveContext& ctx, void* out, uint64_t bytes, cudaStream_t stream) {
  if (out == nullptr || bytes == 0 || ctx.scratch == nullptr) return cudaSuccess;
  const bool vector = (reinterpret_cast<uintptr_t>(out) & 15) == 0;  // as XLA's buffers always are
  const uint64_t work = vector ? bytes / 16 : bytes;
  uint64_t blocks = (work + kPoisonThreads - 1) / kPoisonThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > kPoisonMaxBlocks) blocks = kPoisonMaxBlocks;
  const uint64_t* failed = failed_word(ctx.scratch + call_inbox_offset(ctx.scratch_bytes));
  poison_if_failed_kernel<<<static_cast<unsigned>(blocks), kPoisonThreads, 0, stream>>>(
      failed, static_cast<char*>(out), bytes, vector);
  return cudaGetLastError();
}

}  // namespace jax_mscclpp
