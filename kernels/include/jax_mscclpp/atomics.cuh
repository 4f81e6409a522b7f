// Memory-ordering building blocks shared by every device header.
//
// All accessors use generic addressing, so one helper serves device memory, peer memory mapped through
// peer access or CUDA IPC, and pinned host memory mapped into the device address space. System scope is
// used throughout: peers may be other GPUs or the host proxy thread.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define JAX_MSCCLPP_DEVICE_INLINE __device__ __forceinline__
#define JAX_MSCCLPP_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define JAX_MSCCLPP_HOST_DEVICE_INLINE inline
#endif

namespace jax_mscclpp {

#if defined(__CUDACC__)

// Acquire load: later reads by this thread see everything the writer published before its release.
JAX_MSCCLPP_DEVICE_INLINE uint64_t load_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Relaxed load: atomic, but orders nothing else.
JAX_MSCCLPP_DEVICE_INLINE uint64_t load_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

JAX_MSCCLPP_DEVICE_INLINE void store_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

JAX_MSCCLPP_DEVICE_INLINE void store_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Atomic add whose result nobody reads (a reduction); relaxed: orders nothing by itself.
JAX_MSCCLPP_DEVICE_INLINE void red_add_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("red.relaxed.sys.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Release fence at system scope. Cumulative: writes by other threads of the block that this thread
// observed (through __syncthreads) are ordered before any later store of this thread.
JAX_MSCCLPP_DEVICE_INLINE void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// Sequentially consistent fence at system scope: of two threads that each store then fence then load the other's
// word, at least one sees the other's store (a store-load handshake; release fences do not order a later load).
JAX_MSCCLPP_DEVICE_INLINE void fence_sc_sys() { asm volatile("fence.sc.sys;" ::: "memory"); }

// Nanoseconds from the GPU's global timer. Coarse (updates every ~1 us) but monotonic: only used to bound
// waits, never to order memory.
JAX_MSCCLPP_DEVICE_INLINE uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
