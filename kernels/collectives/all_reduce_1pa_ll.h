// all_reduce, one phase, all pairs, LL protocol (1PA-LL): for small messages.
//
// Every rank writes its whole input as LL16 packets into every peer's scratch (slot = its rank, in the half
// chosen by the epoch's parity), then reduces, for each packet, its own input with the packets of every peer,
// in rank order 0..n-1 so that all ranks produce bit-identical results. No semaphore is touched: each packet's
// flag (this call's epoch) is its own signal. The epoch is read from device memory and the last block bumps
// it, so a launch can be replayed (CUDA graphs, XLA command buffers) unchanged.
//
// Raw-pointer launcher, no XLA types: the FFI handler decodes buffers and attributes and calls it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "jax_mscclpp/memory_channel.cuh"

namespace jax_mscclpp {

struct AllReduce1paLLArgs {
  int32_t rank;
  int32_t nranks;
  const MemoryChannelDeviceHandle* channels;  // device array [nranks * channels_per_peer]; q * cpp reaches peer q
  int32_t channels_per_peer;
  char* scratch;           // this rank's registered scratch: peers' packets land here
  uint64_t scratch_bytes;  // at least all_reduce_1pa_ll_scratch_bytes(count * dtype size, nranks)
  uint64_t* epoch;         // this rank's device epoch counter
  uint64_t* blocks_done;   // device word, 0 between calls
  uint64_t half_bytes = 0;  // distance of the two halves; 0: packed (n slots each, from the scratch's start)
};

// Scratch bytes the algorithm needs for an input of `bytes` on `nranks` ranks (both halves, packed). With
// half_bytes set, each half needs all_reduce_1pa_ll_scratch_bytes / 2 <= half_bytes, and the scratch 2 * half_bytes
// (launch_collective places the halves of every LL algorithm alike: collectives/collective_common.cuh).
size_t all_reduce_1pa_ll_scratch_bytes(size_t bytes, int nranks);

// out[i] = in_0[i] (op) ... (op) in_{n-1}[i] for i < count, on `stream`. dtype / op: codes of
// jax_mscclpp/reduce.cuh. blocks <= 0 picks a grid from the size. Returns cudaErrorInvalidValue for an
// unknown dtype/op or too small a scratch.
cudaError_t launch_all_reduce_1pa_ll(const AllReduce1paLLArgs& args, const void* in, void* out, size_t count,
                                     int32_t dtype, int32_t op, int blocks, int threads, cudaStream_t stream);

}  // namespace jax_mscclpp
