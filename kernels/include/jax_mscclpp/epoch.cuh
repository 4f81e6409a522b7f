// Device epochs (docs/architecture.md, "Epochs"): each (communicator, device) keeps the count of completed
// launches in device memory, so a launch needs nothing from the host per call and can be replayed (CUDA graphs,
// XLA command buffers). A launch uses epoch = count + 1 as its LL flag and scratch-half parity.
//
// The count is replicated over kEpochSlots words so that no block waits for another at the end of a launch:
// block b reads slot b at its start and, at its end, stores the new count into every slot j with
// j % gridDim.x == b. Every slot is written by exactly one block of each launch, and no block writes a slot
// another block of the same launch reads, so there is no atomic, no fence and no "last block" test; the next
// launch on the stream sees every slot equal to the new count (kernel boundary). Grids have at most kEpochSlots
// blocks. The host reads the count from slot 0.
#pragma once

#include <cstdint>

#include "atomics.cuh"

namespace jax_mscclpp {

constexpr int kEpochSlots = 1024;

#if defined(__CUDACC__)

// This launch's epoch, as block blockIdx.x sees it.
JAX_MSCCLPP_DEVICE_INLINE uint64_t launch_epoch(const uint64_t* epochs) {
  return *reinterpret_cast<const volatile uint64_t*>(epochs + blockIdx.x) + 1;
}

// Called by every thread of every block at the end of a launch. The barrier keeps a fast warp from overwriting
// slot blockIdx.x before a slow warp of the same block has read it.
JAX_MSCCLPP_DEVICE_INLINE void publish_epoch(uint64_t* epochs, uint64_t epoch) {
  __syncthreads();
  for (uint32_t j = blockIdx.x + threadIdx.x * gridDim.x; j < static_cast<uint32_t>(kEpochSlots);
       j += blockDim.x * gridDim.x)
    epochs[j] = epoch;
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
