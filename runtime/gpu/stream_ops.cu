#include "stream_ops.h"

#include "jax_mscclpp/atomics.cuh"

namespace jax_mscclpp::cuda {
namespace {

__global__ void write_value64_kernel(uint64_t* ptr, uint64_t value) {
  __threadfence_system();
  store_release_sys(ptr, value);
}

}  // namespace

cudaError_t launch_write_value64(cudaStream_t stream, uint64_t* ptr, uint64_t value) {
  write_value64_kernel<<<1, 1, 0, stream>>>(ptr, value);
  return cudaGetLastError();
}

}  // namespace jax_mscclpp::cuda
