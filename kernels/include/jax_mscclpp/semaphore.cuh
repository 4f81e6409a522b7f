// Semaphores: monotonically increasing 64-bit counters in device memory.
//
// A semaphore connects one sender and one receiver. The receiver owns two words in its own device memory:
// `inbound`, which the sender increments (or, for a host-to-device semaphore, overwrites with a larger
// value), and `expected`, the count the receiver has consumed so far. Both persist across kernel launches,
// so the same launch can be replayed (CUDA graphs, XLA command buffers) without host-side changes.
//
// Contract: for a given semaphore, at most one thread at a time calls wait()/poll() on the receiving side,
// and the values are never reset while channels are in use.
#pragma once

#include <cstdint>

#include "atomics.cuh"
#include "error_record.cuh"

namespace jax_mscclpp {

#if defined(__CUDACC__)
namespace detail {

// True when counter value `v` has reached `target` (wrap-safe).
JAX_MSCCLPP_DEVICE_INLINE bool reached(uint64_t v, uint64_t target) {
  return static_cast<int64_t>(v - target) >= 0;
}

template <bool kAcquire>
JAX_MSCCLPP_DEVICE_INLINE void wait_inbound(const uint64_t* inbound, uint64_t* expected, const WaitSite& site,
                                            WaitOp op, uint64_t count = 1) {
  const uint64_t target = *expected + count;
  *expected = target;
  SpinBound bound(site);
  for (;;) {
    const uint64_t v = kAcquire ? load_acquire_sys(inbound) : load_relaxed_sys(inbound);
    if (reached(v, target) || !bound.tick(op, target, v)) return;
  }
}

template <bool kAcquire>
JAX_MSCCLPP_DEVICE_INLINE bool poll_inbound(const uint64_t* inbound, uint64_t* expected) {
  const uint64_t target = *expected + 1;
  const uint64_t v = kAcquire ? load_acquire_sys(inbound) : load_relaxed_sys(inbound);
  if (!reached(v, target)) return false;
  *expected = target;
  return true;
}

}  // namespace detail
#endif

// Device-to-device semaphore, as seen from one end of a peer pair: it signals the peer's inbound word and
// waits on its own. Built by the host (runtime/gpu/rank_context.h), copied to the GPU by value.
struct D2DSemaphoreDeviceHandle {
  uint64_t* inbound;         // local device memory; the peer increments it
  uint64_t* expected;        // local device memory; touched only by the waiting thread
  uint64_t* remote_inbound;  // the peer's inbound word for signals from this rank (peer-mapped)
  WaitSite site;

#if defined(__CUDACC__)
  // Release: every write this thread made, or observed (e.g. through __syncthreads), before signal() is
  // visible to the peer once its wait() returns. Implemented as a system-scope acq_rel fence followed by a
  // relaxed atomic add on the peer's inbound word.
  JAX_MSCCLPP_DEVICE_INLINE void signal() const {
    fence_acq_rel_sys();
    red_add_relaxed_sys(remote_inbound, 1);
  }

  // Increments the peer's counter without ordering earlier writes: for pure control flow (a barrier whose
  // data dependencies are carried by LL packets or by a later full signal).
  JAX_MSCCLPP_DEVICE_INLINE void relaxed_signal() const { red_add_relaxed_sys(remote_inbound, 1); }

  // Acquire: spins (bounded) until the peer's signals reach expected+1, then consumes one.
  JAX_MSCCLPP_DEVICE_INLINE void wait() const {
    detail::wait_inbound<true>(inbound, expected, site, WaitOp::kSemaphoreWait);
  }

  // wait() for `count` signals at once (count >= 1).
  JAX_MSCCLPP_DEVICE_INLINE void wait(uint64_t count) const {
    detail::wait_inbound<true>(inbound, expected, site, WaitOp::kSemaphoreWait, count);
  }

  // Like wait() but with relaxed loads: pairs with relaxed_signal(); gives no visibility guarantee for data.
  JAX_MSCCLPP_DEVICE_INLINE void relaxed_wait() const {
    detail::wait_inbound<false>(inbound, expected, site, WaitOp::kRelaxedSemaphoreWait);
  }

  // Non-blocking wait(): consumes one signal and returns true if one is pending.
  JAX_MSCCLPP_DEVICE_INLINE bool poll() const { return detail::poll_inbound<true>(inbound, expected); }
#endif
};

// Host-to-device semaphore: the sender is a host proxy thread, which writes increasing values into
// `inbound` in stream order after the data the signal follows (cuStreamWriteValue64 on the proxy stream
// that carried that data). The device only waits.
struct H2DSemaphoreDeviceHandle {
  uint64_t* inbound;   // local device memory, written by the peer's proxy
  uint64_t* expected;  // local device memory; touched only by the waiting thread
  WaitSite site;

#if defined(__CUDACC__)
  // Acquire: after it returns, the data copied before the matching signal is visible to this thread.
  JAX_MSCCLPP_DEVICE_INLINE void wait() const {
    detail::wait_inbound<true>(inbound, expected, site, WaitOp::kHostSemaphoreWait);
  }
  JAX_MSCCLPP_DEVICE_INLINE bool poll() const { return detail::poll_inbound<true>(inbound, expected); }
#endif
};

}  // namespace jax_mscclpp
