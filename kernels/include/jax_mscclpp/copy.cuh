// Cooperative byte copy for "HB" (high bandwidth) transfers: many threads, 16-byte accesses, several
// loads in flight per thread. Handles any size and any alignment: the widest access width that both
// pointers share (16, 8, 4 or 1 bytes) is used for the body, with byte-wise head and tail.
//
// Ordering: plain weak stores. Publishing the data to a peer is the caller's job (a semaphore signal after
// a barrier over the copying threads).
#pragma once

#include <cstddef>
#include <cstdint>

#include "atomics.cuh"

namespace jax_mscclpp {

// 16-byte loads a copying thread keeps in flight (copy_bytes).
constexpr int kCopyInFlight = 4;

#if defined(__CUDACC__)
namespace detail {

// Copies n elements of V with threads [tid, nthreads): each thread keeps kInFlight loads outstanding.
template <class V, int kInFlight = kCopyInFlight>
JAX_MSCCLPP_DEVICE_INLINE void copy_elements(V* __restrict__ dst, const V* __restrict__ src, size_t n, uint32_t tid,
                                             uint32_t nthreads) {
  const size_t stride = nthreads;
  size_t i = tid;
  for (; i + (kInFlight - 1) * stride < n; i += kInFlight * stride) {
    V v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

JAX_MSCCLPP_DEVICE_INLINE void copy_bytewise(unsigned char* dst, const unsigned char* src, size_t n, uint32_t tid,
                                             uint32_t nthreads) {
  for (size_t i = tid; i < n; i += nthreads) dst[i] = src[i];
}

}  // namespace detail

// Copies `bytes` from src to dst using threads [tid, nthreads) (any split: one warp, a block, a grid).
// The ranges must not overlap.
JAX_MSCCLPP_DEVICE_INLINE void copy_bytes(void* dst, const void* src, size_t bytes, uint32_t tid, uint32_t nthreads) {
  unsigned char* d = static_cast<unsigned char*>(dst);
  const unsigned char* s = static_cast<const unsigned char*>(src);
  const uintptr_t rel = reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(s);
  const uint32_t width = (rel & 15) == 0 ? 16 : (rel & 7) == 0 ? 8 : (rel & 3) == 0 ? 4 : 1;
  if (width == 1) {
    detail::copy_bytewise(d, s, bytes, tid, nthreads);
    return;
  }
  size_t head = (width - (reinterpret_cast<uintptr_t>(d) & (width - 1))) & (width - 1);
  if (head > bytes) head = bytes;
  const size_t n = (bytes - head) / width;
  const size_t body = n * width;
  detail::copy_bytewise(d, s, head, tid, nthreads);
  switch (width) {
    case 16:
      detail::copy_elements(reinterpret_cast<uint4*>(d + head), reinterpret_cast<const uint4*>(s + head), n, tid,
                            nthreads);
      break;
    case 8:
      detail::copy_elements(reinterpret_cast<uint2*>(d + head), reinterpret_cast<const uint2*>(s + head), n, tid,
                            nthreads);
      break;
    default:
      detail::copy_elements(reinterpret_cast<uint32_t*>(d + head), reinterpret_cast<const uint32_t*>(s + head), n,
                            tid, nthreads);
      break;
  }
  detail::copy_bytewise(d + head + body, s + head + body, bytes - head - body, tid, nthreads);
}

// One of several independent copies (copy_jobs).
struct CopyJob {
  void* dst;
  const void* src;
  size_t bytes;
};

// The copies job(0) .. job(count - 1), each at most `max_bytes`, with threads [tid, nthreads). Where one job is too
// small to keep every thread's kCopyInFlight loads busy (max_bytes below 16 * kCopyInFlight * nthreads), each job
// gets warps of its own (jobs dealt round-robin to groups of warps), so the loads of every job are in flight
// together where a loop over the jobs would wait for each job's loads in turn (a put to every peer, a copy from
// every peer's slot); larger jobs run one after another with every thread, as copy_bytes alone would. `count` and
// `max_bytes` must be the same for every thread, [tid, nthreads) whole warps; no two ranges may overlap.
template <class Job>
JAX_MSCCLPP_DEVICE_INLINE void copy_jobs(int count, size_t max_bytes, Job job, uint32_t tid, uint32_t nthreads) {
  const uint32_t warps = nthreads / 32;
  if (count > 1 && warps > 1 && max_bytes < size_t{16} * kCopyInFlight * nthreads) {
    const uint32_t per_job = warps >= static_cast<uint32_t>(count) ? warps / count : 1;  // warps of a job
    const uint32_t groups = warps / per_job;                                              // jobs at once
    const uint32_t group = tid / 32 / per_job;
    if (group >= groups) return;
    for (uint32_t j = group; j < static_cast<uint32_t>(count); j += groups) {
      const CopyJob c = job(static_cast<int>(j));
      copy_bytes(c.dst, c.src, c.bytes, tid - group * per_job * 32, per_job * 32);
    }
    return;
  }
  for (int j = 0; j < count; ++j) {
    const CopyJob c = job(j);
    copy_bytes(c.dst, c.src, c.bytes, tid, nthreads);
  }
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
