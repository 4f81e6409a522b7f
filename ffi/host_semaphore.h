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

// Spins, then yields, then sleeps with a growing back-off (the CPU backend often runs more ranks than cores).
// Returns false when `deadline` passes before `sem` reaches `expected`.
inline bool wait_until_at_least(const HostSemaphore& sem, uint64_t expected, Clock::time_point deadline) {
  auto backoff = std::chrono::microseconds(5);
  for (uint64_t i = 0;; ++i) {
    if (sem.count.load(std::memory_order_acquire) >= expected) return true;
    if (i < 128) continue;
    if (i < 512) {
      std::this_thread::yield();
      continue;
    }
    if (Clock::now() > deadline) return sem.count.load(std::memory_order_acquire) >= expected;
    std::this_thread::sleep_for(backoff);
    if (backoff < std::chrono::microseconds(200)) backoff *= 2;
  }
}

}  // namespace jax_mscclpp::host
