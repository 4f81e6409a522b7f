// Stream-ordered helpers the proxy needs from device code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace jax_mscclpp::cuda {

// *ptr = value once the earlier work on `stream` is complete (one-thread kernel with a system fence).
cudaError_t launch_write_value64(cudaStream_t stream, uint64_t* ptr, uint64_t value);

}  // namespace jax_mscclpp::cuda
