#include "launch_gate.h"

#include "jax_mscclpp/atomics.cuh"

namespace jax_mscclpp {
namespace {

__global__ void gate_kernel(const volatile uint32_t* flag, uint32_t* expired, uint64_t limit_ns) {
  const uint64_t start = global_timer_ns();
  while (*flag == 0) {
    if (global_timer_ns() - start > limit_ns) {
      *reinterpret_cast<volatile uint32_t*>(expired) = 1;
      return;
    }
  }
}

}  // namespace

cudaError_t launch_gate(const volatile uint32_t* flag, uint32_t* expired, uint64_t limit_ns, cudaStream_t stream) {
  gate_kernel<<<1, 1, 0, stream>>>(flag, expired, limit_ns);
  return cudaGetLastError();
}

}  // namespace jax_mscclpp
