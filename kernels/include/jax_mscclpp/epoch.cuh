// Device epochs (DESIGN.md): each (communicator, device) keeps the count of completed launches in device
// memory, so a launch needs nothing from the host per call and can be replayed (CUDA graphs, XLA command
// buffers). A launch uses epoch = count + 1 as its LL flag and scratch-half parity; the last of its blocks to
// finish publishes the new count for the next launch on the stream.
#pragma once

#include <cstdint>

#include "atomics.cuh"

namespace jax_mscclpp {

#if defined(__CUDACC__)

// This launch's epoch. Every block reads it at its start, before any block can have finished.
JAX_MSCCLPP_DEVICE_INLINE uint64_t launch_epoch(const uint64_t* completed) {
  return *reinterpret_cast<const volatile uint64_t*>(completed) + 1;
}

// Called by every thread of every block at the end of a launch: the last block to arrive stores `epoch` as the
// new count and rearms `blocks_done` (which is 0 between launches).
__device__ inline void publish_epoch(uint64_t* completed, uint64_t* blocks_done, uint64_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long prev = atomicAdd(reinterpret_cast<unsigned long long*>(blocks_done), 1ull);
    if (prev == gridDim.x - 1) {
      *reinterpret_cast<volatile uint64_t*>(blocks_done) = 0;
      *reinterpret_cast<volatile uint64_t*>(completed) = epoch;
      __threadfence();
    }
  }
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
