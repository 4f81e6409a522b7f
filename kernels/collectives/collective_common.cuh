// Internal helpers shared by the collective kernels of this folder (not a public header): the scratch layout,
// the per-launch epoch, the split of a launch's bytes over chunks and blocks, and the rank-order folds.
//
// Scratch layout (every rank alike; offsets are the same in every rank's scratch):
//
//   [ LL half 0 | LL half 1 | HB half 0 | HB half 1 ]
//
// LL (packet) algorithms only ever write into the LL halves, HB (plain data) algorithms and the port-channel
// ring only into the HB halves. The split matters: an LL reader spins on the flag words of its packets, and if
// plain data of an earlier HB launch lay there, a data word equal to this launch's flag would be taken for a
// packet. Packets only ever carry epochs as flags, all older than the current one, so stale packets never pass.
// A launch with epoch e uses half (e & 1) of its region.
//
// Why launch e + 2 cannot overwrite what a slow peer still reads from launch e (same half): every launch of every
// algorithm here makes each rank's completion depend on data that every other rank produced in that launch (an
// all-reduce, reduce-scatter, all-gather or all-to-all needs a contribution of every rank, directly or through
// the ring). So a rank that starts launch e + 2 has completed launch e + 1, which means every peer has started
// launch e + 1 on its stream, which means every peer's launch e has completed (stream order): its reads of
// launch e's data are over. Launch e + 1 itself writes the other half. Within a launch, regions written by
// different phases are disjoint. The per-algorithm files state which flag or signal carries the argument.
#pragma once

#include <cstdint>
#include <type_traits>

#include "collectives/collective.h"
#include "collectives/failed_outputs.cuh"
#include "jax_mscclpp/packet.cuh"
#include "jax_mscclpp/epoch.cuh"
#include "jax_mscclpp/reduce.cuh"

namespace jax_mscclpp::collectives {

constexpr uint64_t kLLHalfCap = 4ull << 20;  // LL halves need little: LL algorithms serve small messages

JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t round_up(uint64_t a, uint64_t b) { return ceil_div(a, b) * b; }
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t round_down(uint64_t a, uint64_t b) { return a / b * b; }
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

struct ScratchLayout {
  uint64_t ll_half;
  uint64_t hb_half;

  JAX_MSCCLPP_HOST_DEVICE_INLINE static ScratchLayout of(uint64_t scratch_bytes) {
    ScratchLayout s;
    s.ll_half = min_u64(round_down(scratch_bytes / 4, 256), kLLHalfCap);
    s.hb_half = round_down((scratch_bytes - 2 * s.ll_half) / 2, 256);
    return s;
  }
  JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t ll(uint64_t epoch) const { return (epoch & 1) * ll_half; }
  JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t hb(uint64_t epoch) const { return 2 * ll_half + (epoch & 1) * hb_half; }
};

// One launch's share of a call: bytes [lo, lo + len) of every block. Block q of the input (output) starts at
// in + q * in_stride (out + q * out_stride); all_reduce has one block.
struct Piece {
  const char* in;
  char* out;
  uint64_t in_stride;
  uint64_t out_stride;
  uint64_t lo;
  uint64_t len;
};

// [lo, hi) of part i of `parts` over [0, total), boundaries multiples of `align`: the same split on every rank.
struct Span {
  uint64_t lo;
  uint64_t hi;
  JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t size() const { return hi - lo; }
};
JAX_MSCCLPP_HOST_DEVICE_INLINE Span split(uint64_t total, uint64_t i, uint64_t parts, uint64_t align = 16) {
  const uint64_t step = round_up(ceil_div(total, parts), align);
  const uint64_t lo = min_u64(i * step, total);
  return {lo, min_u64(lo + step, total)};
}
// Span of part i when every part is `step` long (the last ones clipped, possibly empty).
JAX_MSCCLPP_HOST_DEVICE_INLINE Span part_of(uint64_t total, uint64_t i, uint64_t step) {
  const uint64_t lo = min_u64(i * step, total);
  return {lo, min_u64(lo + step, total)};
}

// Host: a call cut into launches, one per piece (the collectives' launch_pieces and the plan executor's launch_plan):
// launch(lo, len) for lo = 0, piece, 2 * piece, ... below `total`, len = min(piece, total - lo). Stops at the first
// launch that fails and returns its error; cudaSuccess after the last (and for total 0).
template <class Launch>
inline cudaError_t launch_in_pieces(uint64_t total, uint64_t piece, Launch&& launch) {
  for (uint64_t lo = 0; lo < total; lo += piece) {
    const cudaError_t e = launch(lo, min_u64(piece, total - lo));
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

#if defined(__CUDACC__)

// Chunk q of a launch: all_reduce cuts the piece into n chunks of `chunk` bytes (16-byte multiples; the last
// ones shorter or empty); reduce_scatter's chunk q is block q of the input, the whole piece long, and its output
// is one block.
struct Chunks {
  Piece p;
  bool all_reduce;
  uint64_t chunk;
  __device__ uint64_t len(int q) const { return all_reduce ? part_of(p.len, q, chunk).size() : p.len; }
  __device__ const char* in(int q) const {
    return all_reduce ? p.in + p.lo + q * chunk : p.in + q * p.in_stride + p.lo;
  }
  __device__ char* out(int q) const { return all_reduce ? p.out + p.lo + q * chunk : p.out + p.lo; }
};

JAX_MSCCLPP_DEVICE_INLINE const MemoryChannelDeviceHandle& mem_channel(const CollectiveContext& c, int peer, int i) {
  return c.mem[peer * c.channels_per_peer + i];
}
// Rank q's scratch as mapped here: from the kernel arguments when the context carries it.
JAX_MSCCLPP_DEVICE_INLINE char* remote_scratch(const CollectiveContext& c, int q) {
  return q < kDirectPeers ? c.peer_scratch[q] : mem_channel(c, q, 0).remote;
}
JAX_MSCCLPP_DEVICE_INLINE const PortChannelDeviceHandle& port_channel(const CollectiveContext& c, int peer, int i) {
  return c.port[peer * c.channels_per_peer + i];
}

// Every thread of every block, at the start of a launch: this launch's epoch (jax_mscclpp/epoch.cuh), its LL flag
// and scratch half. Block 0 posts the launch's call words to every rank (jax_mscclpp/call_check.cuh).
JAX_MSCCLPP_DEVICE_INLINE uint64_t begin_launch(const CollectiveContext& c) {
  const uint64_t e = ::jax_mscclpp::launch_epoch(c.epoch);
  if (blockIdx.x == 0) {
    const uint64_t inbox = call_inbox_offset(c.scratch_bytes);
    for (int q = threadIdx.x; q < c.nranks; q += blockDim.x)
      post_call((q == c.rank ? c.scratch : remote_scratch(c, q)) + inbox, c.rank, e, c.call);
  }
  return e;
}

// Every thread of every block, at the end of a launch: block 0 checks that every peer's launch `e` belongs to
// the same call (if not: every rank's failed word is set, so that peers waiting for data stop at once, and this
// rank traps naming both calls), then epoch `e` becomes the count the next launch reads, then the call's outputs
// are poisoned should the rank have failed (c.failed_outputs; failed_outputs.cuh).
JAX_MSCCLPP_DEVICE_INLINE void finish_launch(const CollectiveContext& c, uint64_t e) {
  if (blockIdx.x == 0) {
    const uint64_t offset = call_inbox_offset(c.scratch_bytes);
    char* inbox = c.scratch + offset;
    const auto fail = [&c, offset] {
      for (int q = 0; q < c.nranks; ++q) mark_failed((q == c.rank ? c.scratch : remote_scratch(c, q)) + offset, c.rank);
      __threadfence_system();
    };
    for (int q = threadIdx.x; q < c.nranks; q += blockDim.x)
      if (q != c.rank) check_call(inbox, q, e, c.call, mem_channel(c, q, 0).semaphore.site, fail);
  }
  ::jax_mscclpp::publish_epoch(c.epoch, e);
  ::jax_mscclpp::poison_failed_outputs(c.failed_outputs);
}

// Block-wide (every thread calls): signal every peer on channel b, thread k - 1 signalling peer rank + k, so the
// system-scope fences of the n - 1 signals run in parallel. The block barrier first makes the whole block's
// stores part of what each signal releases (the fence is cumulative over what its thread observed).
__device__ inline void signal_peers(const CollectiveContext& c, int b) {
  __syncthreads();
  for (int k = threadIdx.x + 1; k < c.nranks; k += blockDim.x) mem_channel(c, (c.rank + k) % c.nranks, b).signal();
}
// Block-wide: wait for every peer's signal on channel b (thread k - 1 waits for peer rank + k: one waiter per
// semaphore, all polling at once); the block barrier after makes what each wait acquired visible to the block.
__device__ inline void wait_peers(const CollectiveContext& c, int b) {
  for (int k = threadIdx.x + 1; k < c.nranks; k += blockDim.x) mem_channel(c, (c.rank + k) % c.nranks, b).wait();
  __syncthreads();
}
// Every rank's block `b` meets every peer's block `b`: what each wrote before is visible to the others after.
__device__ inline void barrier_peers(const CollectiveContext& c, int b) {
  signal_peers(c, b);
  wait_peers(c, b);
}

// 8 bytes at p (any alignment); only `valid` bytes are read, the rest are zero.
JAX_MSCCLPP_DEVICE_INLINE uint2 load8(const char* p, uint32_t valid) {
  if (valid == 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0) return *reinterpret_cast<const uint2*>(p);
  uint2 v = make_uint2(0, 0);
  unsigned char* b = reinterpret_cast<unsigned char*>(&v);
  for (uint32_t j = 0; j < valid; ++j) b[j] = static_cast<unsigned char>(p[j]);
  return v;
}
JAX_MSCCLPP_DEVICE_INLINE void store8(char* p, uint2 v, uint32_t valid) {
  if (valid == 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
    *reinterpret_cast<uint2*>(p) = v;
    return;
  }
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
  for (uint32_t j = 0; j < valid; ++j) p[j] = static_cast<char>(b[j]);
}

// dst(k)[i] = src(0)[i] (op) src(1)[i] (op) ... (op) src(n-1)[i] for i < bytes / sizeof(T) and k < ndst, threads
// [tid, nthreads). A left fold in rank order with one accumulator type (f16/bf16 in f32) and one rounding at the
// end, in the vector path and the scalar path alike: every algorithm built on it gives the same bits.
// `src(q)` / `dst(k)` return the pointers (local or peer memory). The first kMax of each are kept in registers
// and their loads issued together; more (n > kMax) are handled one by one. 16-byte vectors when every pointer is
// 16-byte aligned, elements otherwise (and for a tail shorter than 16 bytes).
template <class T, class Op, int kMax = 8, class Src, class Dst>
__device__ inline void fold_rank_order(Src src, int n, Dst dst, int ndst, uint64_t bytes, uint32_t tid,
                                       uint32_t nthreads) {
  using Tr = ReduceTraits<T>;
  const char* sp[kMax];
  char* dp[kMax];
  uintptr_t mis = 0;
#pragma unroll
  for (int k = 0; k < kMax; ++k) {
    sp[k] = k < n ? src(k) : nullptr;
    dp[k] = k < ndst ? dst(k) : nullptr;
    mis |= reinterpret_cast<uintptr_t>(sp[k]) | reinterpret_cast<uintptr_t>(dp[k]);
  }
  for (int q = kMax; q < n; ++q) mis |= reinterpret_cast<uintptr_t>(src(q));
  for (int k = kMax; k < ndst; ++k) mis |= reinterpret_cast<uintptr_t>(dst(k));
  const uint64_t count = bytes / sizeof(T);
  uint64_t done = 0;
  if ((mis & 15) == 0) {
    const uint64_t nvec = bytes / 16;
    for (uint64_t i = tid; i < nvec; i += nthreads) {
      uint4 v[kMax];
#pragma unroll
      for (int k = 0; k < kMax; ++k) {
        if (k < n) v[k] = reinterpret_cast<const uint4*>(sp[k])[i];
      }
      VecAccumulator<T, Op> acc;
      acc.init(v[0]);
#pragma unroll
      for (int k = 1; k < kMax; ++k) {
        if (k < n) acc.add(v[k]);
      }
      for (int q = kMax; q < n; ++q) acc.add(reinterpret_cast<const uint4*>(src(q))[i]);
      const uint4 res = acc.result();
#pragma unroll
      for (int k = 0; k < kMax; ++k) {
        if (k < ndst) reinterpret_cast<uint4*>(dp[k])[i] = res;
      }
      for (int k = kMax; k < ndst; ++k) reinterpret_cast<uint4*>(dst(k))[i] = res;
    }
    done = nvec * (16 / sizeof(T));
  }
  for (uint64_t i = done + tid; i < count; i += nthreads) {  // constant indices only: sp/dp stay in registers
    typename Tr::Acc a = Tr::widen(reinterpret_cast<const T*>(sp[0])[i]);
#pragma unroll
    for (int k = 1; k < kMax; ++k) {
      if (k < n) a = combine<Op>(a, Tr::widen(reinterpret_cast<const T*>(sp[k])[i]));
    }
    for (int q = kMax; q < n; ++q) a = combine<Op>(a, Tr::widen(reinterpret_cast<const T*>(src(q))[i]));
    const T res = Tr::narrow(a);
#pragma unroll
    for (int k = 0; k < kMax; ++k) {
      if (k < ndst) reinterpret_cast<T*>(dp[k])[i] = res;
    }
    for (int k = kMax; k < ndst; ++k) reinterpret_cast<T*>(dst(k))[i] = res;
  }
}

// dispatch_dtype_op (reduce.cuh's one switch) with signed integer sums folded onto the unsigned types: a wrapping
// sum has the same bits either way, and the kernels are instantiated 4 times fewer. f(T{}, Op{}) is called with
// the type to launch; false for unknown codes.
template <class F>
inline bool dispatch_reduction(int32_t dtype, int32_t op, F&& f) {
  if (op == codes::kSum) {
    switch (dtype) {
      case codes::kS8: dtype = codes::kU8; break;
      case codes::kS16: dtype = codes::kU16; break;
      case codes::kS32: dtype = codes::kU32; break;
      case codes::kS64: dtype = codes::kU64; break;
      default: break;
    }
  }
  return dispatch_dtype_op(dtype, op, [&](auto t, auto o) {
    using T = decltype(t);
    using Op = decltype(o);
    if constexpr (!(std::is_integral_v<T> && std::is_signed_v<T> && std::is_same_v<Op, SumOp>)) f(t, o);
  });
}

// The tail of every launcher of a reducing kernel (host): launch(T{}, Op{}) issues the kernel instantiated for the
// call's element type and reduction (dispatch_reduction) and returns cudaSuccess, or the error that kept it from
// issuing one. The result: that error, else the launch's (cudaGetLastError); cudaErrorInvalidValue for codes
// without a kernel.
template <class Launch>
inline cudaError_t launch_reduction(int32_t dtype, int32_t op, Launch&& launch) {
  cudaError_t result = cudaErrorInvalidValue;
  dispatch_reduction(dtype, op, [&](auto t, auto o) {
    result = launch(t, o);
    if (result == cudaSuccess) result = cudaGetLastError();
  });
  return result;
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp::collectives
