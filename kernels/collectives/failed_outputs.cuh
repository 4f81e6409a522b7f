// The poisoning of a launch's outputs by its own kernel (collective.h, FailedOutputs): each block, at its end, after
// its last write of the outputs, reads the rank's failed word; a block that finds it set sets every bit of every
// output (all of them, not its share: a block that ended earlier found the word unset and poisoned nothing).
//
// Why no output keeps a result once any block of the launch found the word set: a block B that found it unset wrote
// its share, passed a block barrier, and its thread 0 made a sequentially consistent fence (GPU scope) before its
// load; a block A that found it set loaded it after the same fence, then wrote the poison after a block barrier.
// The two fences are ordered: if B's comes first, B's writes precede A's poison (the fence is cumulative over what
// the barrier made thread 0 observe), so the poison lands last; if A's comes first, A saw the word before B's fence,
// so B's load after its fence sees it too (the word only ever goes from 0 to set), and B poisons after its writes.
// A failure set after every block's load poisons nothing of this launch: as for a check after the launch, the
// call's outputs are what its kernel wrote, and the next launches poison theirs.
#pragma once

#include <cstdint>

#include "collectives/collective.h"
#include "jax_mscclpp/atomics.cuh"

namespace jax_mscclpp {

#if defined(__CUDACC__)

// Every thread of the block, after its last write of the launch's outputs: whether the rank's failed word (null:
// never) is set. A block barrier before the load and one after (every thread gets the answer).
__device__ inline bool block_saw_failure(const uint64_t* failed) {
  if (failed == nullptr) return false;
  __syncthreads();
  int set = 0;
  if (threadIdx.x == 0) {
    __threadfence();
    set = load_relaxed_sys(failed) != 0;
  }
  return __syncthreads_or(set) != 0;
}

// Every thread of the block: sets every bit of `bytes` at `out` (any alignment; 16-byte stores where aligned).
__device__ inline void poison_bytes(char* out, uint64_t bytes) {
  if (out == nullptr || bytes == 0) return;
  const uint64_t misaligned = reinterpret_cast<uintptr_t>(out) & 15;
  const uint64_t head = misaligned == 0 ? 0 : (16 - misaligned < bytes ? 16 - misaligned : bytes);
  const uint64_t words = (bytes - head) / 16;
  for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) out[i] = static_cast<char>(0xFF);
  uint4* vectors = reinterpret_cast<uint4*>(out + head);
  for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) vectors[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
  for (uint64_t i = head + words * 16 + threadIdx.x; i < bytes; i += blockDim.x) out[i] = static_cast<char>(0xFF);
}

// Every thread of every block of a launch, at its end: poisons the regions of `o` should the rank have failed.
__device__ inline void poison_failed_outputs(const FailedOutputs& o) {
  if (o.bytes[0] == 0 && o.bytes[1] == 0) return;  // nothing to poison: no block reads the word
  if (!block_saw_failure(o.failed)) return;
  for (int r = 0; r < kFailedOutputRegions; ++r) poison_bytes(o.out[r], o.bytes[r]);
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
