// The one entry point of the collective library on the GPU: a rank's device resources (CollectiveContext,
// built once per communicator and passed by value) and launch_collective(), which the CUDA FFI handler calls
// with raw pointers. No XLA types here.
//
// Layouts are those of ffi/collective_types.h (block_count elements per block):
//   all_reduce in[n] -> out[n]; all_gather in[n] -> out[world][n]; reduce_scatter in[world][n] -> out[n];
//   all_to_all in[world][n] -> out[world][n].
// Every launch reads this call's epoch from ctx.epoch (device memory), uses epoch + 1 as its flag and scratch
// half, and the last block bumps the epoch: a launch sequence can be captured once and replayed (CUDA graphs,
// XLA command buffers). Messages larger than one round of scratch are pipelined: launch_collective issues as
// many launches (each one epoch) as needed, the number depending only on the sizes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "jax_mscclpp/memory_channel.cuh"
#include "jax_mscclpp/port_channel.cuh"
#include "jax_mscclpp/switch_channel.cuh"

namespace jax_mscclpp {

struct CollectiveContext {
  int32_t rank;
  int32_t nranks;
  int32_t channels_per_peer;
  int32_t reserved;
  char* scratch;                         // registered scratch of this rank (both halves)
  uint64_t scratch_bytes;
  const MemoryChannelDeviceHandle* mem;  // device array [nranks * channels_per_peer]; entry p*cpp + c reaches p
  const PortChannelDeviceHandle* port;   // device array [nranks * channels_per_peer], or null (no proxy)
  SwitchChannelDeviceHandle sw;          // emulated over every rank's scratch (hardware multicast: opt-in only)
  uint64_t* epoch;                       // device counter of calls completed
  uint64_t* blocks_done;                 // device word, 0 between calls
};

// Collective and algorithm codes: ffi/collective_types.h (Collective, Algorithm). dtype / op codes:
// jax_mscclpp/reduce.cuh (codes::DTypeCode, codes::ReduceCode).

// True when `algorithm` implements `collective` for this dtype/op on this build.
bool collective_supported(int32_t collective, int32_t algorithm, int32_t dtype, int32_t op);

// Launches one call on `stream`. cudaErrorInvalidValue for an unsupported combination; cudaErrorNotReady
// when the context lacks what the algorithm needs (e.g. port channels).
cudaError_t launch_collective(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                              void* out, uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream);

}  // namespace jax_mscclpp
