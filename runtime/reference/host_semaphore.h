// Host-memory semaphores of the reference backend (platform "cpu").
//
// Contract (the same as the device semaphores of docs/architecture.md): a peer's signal is a release fetch_add on the
// semaphore it shares with me; my wait acquires until the count reaches an expected value that only I own and
// bump. Every byte the peer wrote before its signal is visible after my wait returns. Waits are bounded: they
// give up at a deadline instead of hanging when a peer never comes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace jax_mscclpp::host {

using Clock = std::chrono::steady_clock;

struct alignas(64) HostSemaphore {
  std::atomic<uint64_t> count{0};
};

enum class WaitResult { kArrived, kTimedOut, kStopped };

// Spins, then yields, then sleeps with a growing back-off (the CPU backend often runs more ranks than cores).
// While sleeping it asks `stop()` (about every 200 us) whether to give up early: a peer already failed, or the
// peer is in another call. Returns why the wait ended.
template <class Stop>
inline WaitResult wait_until_at_least(const HostSemaphore& sem, uint64_t expected, Clock::time_point deadline,
                                      Stop&& stop) {
  auto backoff = std::chrono::microseconds(5);
  for (uint64_t i = 0;; ++i) {
    if (sem.count.load(std::memory_order_acquire) >= expected) return WaitResult::kArrived;
    if (i < 128) continue;
    if (i < 512) {
      std::this_thread::yield();
      continue;
    }
    if (Clock::now() > deadline)
      return sem.count.load(std::memory_order_acquire) >= expected ? WaitResult::kArrived : WaitResult::kTimedOut;
    if (stop()) return WaitResult::kStopped;
    std::this_thread::sleep_for(backoff);
    if (backoff < std::chrono::microseconds(200)) backoff *= 2;
  }
}

// Returns false when `deadline` passes before `sem` reaches `expected`.
inline bool wait_until_at_least(const HostSemaphore& sem, uint64_t expected, Clock::time_point deadline) {
  return wait_until_at_least(sem, expected, deadline, [] { return false; }) == WaitResult::kArrived;
}

}  // namespace jax_mscclpp::host
