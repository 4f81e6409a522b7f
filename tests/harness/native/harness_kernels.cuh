// Device helpers shared by the harness kernels (harness_channels.cu, harness_typed.cu).
#pragma once

#include <cstdint>

#include "harness.h"
#include "jax_mscclpp/epoch.cuh"

namespace jax_mscclpp::cuda::harness {

struct Slice {
  uint64_t lo;
  uint64_t hi;
  __device__ uint64_t size() const { return hi - lo; }
};

// Part `b` of `nb` of [0, total), boundaries multiples of `align` (the same split on every rank, so block b
// of one rank always pairs with block b of another).
__device__ inline Slice block_slice(uint64_t total, uint32_t b, uint32_t nb, uint64_t align = 16) {
  uint64_t chunk = (total + nb - 1) / nb;
  chunk = (chunk + align - 1) / align * align;
  const uint64_t lo = b * chunk < total ? b * chunk : total;
  const uint64_t hi = lo + chunk < total ? lo + chunk : total;
  return {lo, hi};
}

// Deterministic data word of (rank, epoch, index): any stale or misplaced word shows up as a mismatch.
__device__ inline uint32_t pattern(uint32_t rank, uint64_t epoch, uint64_t i) {
  uint32_t x = rank * 0x9E3779B1u ^ static_cast<uint32_t>(epoch) * 0x85EBCA6Bu ^ static_cast<uint32_t>(epoch >> 32) ^
               static_cast<uint32_t>(i) * 0xC2B2AE35u ^ static_cast<uint32_t>(i >> 32);
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// The count of completed launches, as this block sees it (jax_mscclpp/epoch.cuh).
__device__ inline uint64_t read_epoch(const RankArgs& a) { return launch_epoch(a.epoch) - 1; }

// Every thread of every block at the end of a launch: the next launch on this stream sees `new_epoch`.
__device__ inline void finish_epoch(const RankArgs& a, uint64_t new_epoch) { publish_epoch(a.epoch, new_epoch); }

__device__ inline const MemoryChannelDeviceHandle& mem(const RankArgs& a, int peer, int c) {
  return a.mem[peer * a.channels_per_peer + c];
}

// Peer k (1 <= k < nranks) of this rank, in a rotated order so ranks do not all hit one peer first.
__device__ inline int peer_at(const RankArgs& a, int k) { return (a.rank + k) % a.nranks; }

// Barrier with every peer over channel `c`: signal all, then wait all (thread 0), bracketed by block barriers.
__device__ inline void barrier_all(const RankArgs& a, int c) {
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < a.nranks; ++k) mem(a, peer_at(a, k), c).signal();
    for (int k = 1; k < a.nranks; ++k) mem(a, peer_at(a, k), c).wait();
  }
  __syncthreads();
}

__device__ inline void add_counter(const RankArgs& a, int i, unsigned long long v) {
  if (v != 0) atomicAdd(&a.counters[i], v);
}

}  // namespace jax_mscclpp::cuda::harness
