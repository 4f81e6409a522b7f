// Host-memory semaphores of the reference backend (platform "cpu"), and the doorbell a waiting rank sleeps on.
//
// Contract (the same as the device semaphores of docs/architecture.md): a peer's signal is a release fetch_add on the
// semaphore it shares with me, then a ring of my doorbell; my wait acquires until the count reaches an expected
// value that only I own and bump. Every byte the peer wrote before its signal is visible after my wait returns.
// Waits are bounded: they give up at a deadline instead of hanging when a peer never comes.
//
// The CPU backend often runs more ranks than cores, beside other work: a wait spins only briefly (and not at all
// where the ranks outnumber the cores), then blocks in the kernel (a futex on Linux) until the peers it waits for
// rang, so a waiting rank leaves its core to the ranks it waits for and to the machine's other work.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#endif

namespace jax_mscclpp::host {

using Clock = std::chrono::steady_clock;

struct alignas(64) HostSemaphore {
  std::atomic<uint64_t> count{0};
};

enum class WaitResult { kArrived, kTimedOut, kStopped };

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// One rank's doorbell. Whoever publishes something the rank may wait for (a signal, packets) rings it after the
// stores it publishes; a waiting rank that found nothing sleeps on it until enough rings came, an urgent ring (the
// group's failure) or a time limit. A Sleeper counts itself and notes the rings so far before the waiter's last
// check, so a ring after that check cannot be lost: either the check saw the ringer's stores, or the ringer sees
// the sleeper (both sides' seq_cst operations) and the rings it asked for, and wakes it. A ring with nobody asleep
// costs one atomic add and two loads.
class alignas(64) Doorbell {
 public:
  void ring(bool urgent = false) {
    const uint32_t rung = rings_.fetch_add(1, std::memory_order_seq_cst) + 1;
    const uint32_t wake_at = wake_at_.load(std::memory_order_seq_cst);
    const uint32_t sleepers = sleepers_.load(std::memory_order_seq_cst);
    // More than one sleeper: their wake_at_ are not all known here, so wake all (a rank's calls come one at a
    // time, so its doorbell has one sleeper at most; this keeps a second one safe).
    if (sleepers > 1 || (sleepers == 1 && (urgent || int32_t(rung - wake_at) >= 0))) wake_all();
  }

  // Counts as asleep from construction, for the checks made before sleep().
  class Sleeper {
   public:
    explicit Sleeper(Doorbell& bell) : bell_(bell) {
      bell_.sleepers_.fetch_add(1, std::memory_order_seq_cst);
      seen_ = bell_.rings_.load(std::memory_order_seq_cst);
    }
    ~Sleeper() { bell_.sleepers_.fetch_sub(1, std::memory_order_relaxed); }
    Sleeper(const Sleeper&) = delete;
    Sleeper& operator=(const Sleeper&) = delete;
    // Sleeps until `rings` more rings (at least 1) came since construction, an urgent ring, or `until`; may return
    // earlier (a ring came before the sleep began, or spuriously): callers check again.
    void sleep(Clock::time_point until, uint32_t rings) {
      bell_.wake_at_.store(seen_ + std::max<uint32_t>(rings, 1), std::memory_order_seq_cst);
      if (bell_.rings_.load(std::memory_order_seq_cst) == seen_) bell_.sleep_while_unrung(seen_, until);
    }

   private:
    Doorbell& bell_;
    uint32_t seen_ = 0;
  };

 private:
#if defined(__linux__)
  static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);
  uint32_t* word() { return reinterpret_cast<uint32_t*>(&rings_); }
  void wake_all() { syscall(SYS_futex, word(), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0); }
  void sleep_while_unrung(uint32_t seen, Clock::time_point until) {
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec timeout{time_t(ns / 1000000000), long(ns % 1000000000)};
    // Returns at once if the word moved on from `seen` (a ring came first).
    syscall(SYS_futex, word(), FUTEX_WAIT_PRIVATE, seen, &timeout, nullptr, 0);
  }
#else
  void wake_all() {}
  void sleep_while_unrung(uint32_t seen, Clock::time_point until) {  // no futex: short naps
    const auto nap = std::min<Clock::duration>(until - Clock::now(), std::chrono::microseconds(50));
    if (rings_.load(std::memory_order_seq_cst) == seen && nap > Clock::duration::zero())
      std::this_thread::sleep_for(nap);
  }
#endif

  std::atomic<uint32_t> rings_{0};
  std::atomic<uint32_t> wake_at_{0};   // the sleeper's: the count of rings that wakes it
  std::atomic<uint32_t> sleepers_{0};
};

// The CPUs this process may run on.
inline int available_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
#endif
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

// How long a wait of a communicator of `ranks` ranks (all of them threads of this process) spins before it sleeps:
// kWaitSpin where every rank can have a core of its own, else not at all (a waiting rank's core is then one that a
// rank it waits for needs).
inline constexpr auto kWaitSpin = std::chrono::microseconds(20);
inline Clock::duration wait_spin_for(int ranks) {
  static const int cpus = available_cpus();
  return cpus > ranks ? Clock::duration(kWaitSpin) : Clock::duration::zero();
}

// How long a sleeping wait sleeps at most between checks of `stop()` and the deadline (growing from the first
// slice to the last).
inline constexpr auto kFirstSleep = std::chrono::microseconds(100);
inline constexpr auto kLongestSleep = std::chrono::milliseconds(2);

// Waits until `missing()` is 0, `deadline` passes, or `stop()` says to give up early (a peer already failed, or
// is in another call). `missing()` reads (acquire) what the peers publish before they ring `bell` and returns how
// many rings at least must still come before it can be 0 (1 where it cannot tell). The wait spins for `spin`
// (wait_spin_for), then sleeps on `bell` until that many rings came, waking at least every kLongestSleep to ask
// `stop()` and the clock. Returns why the wait ended.
template <class Missing, class Stop>
inline WaitResult wait_until(Doorbell& bell, Missing&& missing, Clock::time_point deadline, Stop&& stop,
                             Clock::duration spin) {
  if (spin > Clock::duration::zero()) {
    const auto spin_end = Clock::now() + spin;
    for (uint32_t i = 1;; ++i) {
      if (missing() == 0) return WaitResult::kArrived;
      cpu_relax();
      if (i % 64 == 0 && Clock::now() >= spin_end) break;
    }
  }
  Clock::duration slice = kFirstSleep;
  for (;;) {
    Doorbell::Sleeper sleeper(bell);
    const uint32_t rings = missing();
    if (rings == 0) return WaitResult::kArrived;
    const auto now = Clock::now();
    if (now > deadline) return WaitResult::kTimedOut;
    if (stop()) return WaitResult::kStopped;
    sleeper.sleep(std::min(deadline, now + slice), rings);
    slice = std::min<Clock::duration>(2 * slice, kLongestSleep);
  }
}

}  // namespace jax_mscclpp::host
