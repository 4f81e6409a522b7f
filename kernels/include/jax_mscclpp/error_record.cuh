// Bounded waits and the timeout error record.
//
// Every spin on the device is bounded (or, under TimeoutPolicy::kWait below, reported once it passes the bound).
// Each rank owns one RuntimeConfig in pinned, mapped host memory:
// the host writes the timeout there (JAX_MSCCLPP_TIMEOUT_S, default 300 s) and may change it between
// launches; the device reads it only after a wait has already spun for a while. When a wait expires (or a
// call check finds a peer in another call, call_check.cuh), the first such thread of that rank fills `error`
// (rank, peer, op, epoch, ...) and publishes it with a system fence and `valid = 1`; the host reads the record
// through its own pointer and reports it as a readable message (runtime/gpu/runtime_config.h). Then, as the host
// set `stop_on_failure` (JAX_MSCCLPP_TRAP_ON_FAILURE):
//   - trap (the default): the thread traps, which ends every kernel of the process's CUDA context and poisons it;
//   - stop: the thread marks its rank's failed word (call_inbox.cuh) and its wait gives up: every later wait of
//     the rank's kernels gives up too at its first slow-path check, so each kernel runs to its end in bounded time
//     with outputs that are not valid, and the context stays usable. The host refuses the rank's later calls.
//
// Whether a wait past the timeout is a failure at all is the rank's TimeoutPolicy (`on_timeout`, set by the host):
//   - kFail (the JAX path's; the NCCL-API library's where JAX_MSCCLPP_NCCL_ON_TIMEOUT=fail, or where it is unset and
//     JAX_MSCCLPP_TIMEOUT_S is set: nccl/runtime/timeout_policy.h): as above;
//   - kWait (the NCCL-API library's default, as NVIDIA's NCCL waits for a late peer): the wait goes on. The first such
//     wait of the rank publishes `late` (a LateReport: rank, peer, op, epoch, observed, waited_ns, the calls), which is
//     not the error record: nothing that reads `error` sees a failure. The host prints it and re-arms it (LateReport).
//     A set failed word (an abort from the host, a peer's failure) still ends the wait at the next check, as above.
#pragma once

#include <cstdint>

#include "atomics.cuh"
#include "call_inbox.cuh"

namespace jax_mscclpp {

// What a timed-out thread was waiting for.
enum class WaitOp : uint32_t {
  kNone = 0,
  kSemaphoreWait = 1,         // MemoryChannel::wait (device-to-device semaphore, acquire)
  kRelaxedSemaphoreWait = 2,  // MemoryChannel::relaxed_wait
  kHostSemaphoreWait = 3,     // PortChannel::wait (semaphore written by the peer's proxy)
  kPacketRead = 4,            // LL packet flag
  kFifoPush = 5,              // proxy FIFO full (backpressure)
  kFifoSync = 6,              // PortChannel::flush, or waiting for the proxy to consume a trigger
  kUser = 7,                  // any other bounded spin (kernels in kernels/collectives)
  kCallCheck = 8,             // a peer's call words of this launch (call_check.cuh)
  kCallMismatch = 9,          // not a timeout: the peer's call words differ from this rank's (call_check.cuh)
  kPeerFailed = 10,           // not a timeout: a wait stopped because rank `peer` failed the communicator
  kP2PData = 11,              // launch_p2p_group: no stream could move; the first waits for `peer`'s next chunk
  kP2PCredit = 12,            // launch_p2p_group: no stream could move; the first waits for `peer`'s credit
  kRaggedBounds = 13,         // not a timeout: ragged_all_to_all rows for or from `peer` outside the operand or
                              // output (epoch: the first row, observed: the rows; a negative one as two's complement)
  kRaggedSizes = 14,          // not a timeout: `peer` sent `epoch` rows where recv_sizes says `observed`
  kRaggedPosted = 15,         // ragged_all_to_all, direct exchange: the send waits for `peer` to post its output
  kRaggedWritten = 16,        // ragged_all_to_all, direct exchange: the receive waits for `peer`'s lanes' rows
};

constexpr uint64_t kDefaultTimeoutNs = 300ull * 1000 * 1000 * 1000;

struct ErrorRecord {
  uint32_t claimed;  // 0 -> 1 by the first thread that times out (atomicCAS)
  uint32_t valid;    // written 1 last, after the fields below
  int32_t rank;
  int32_t peer;      // -1 when not tied to one peer
  uint32_t op;       // WaitOp
  int32_t block;
  int32_t thread;
  uint32_t interrupted_op;  // kPeerFailed: the WaitOp of the wait that stopped
  uint64_t epoch;     // the value waited for: expected semaphore value, packet flag or FIFO position
  uint64_t observed;  // the last value read (kCallMismatch: the epoch of the peer's words)
  uint64_t waited_ns;
  // The calls (call_inbox.cuh) and their launch epochs (0: unknown). kCallMismatch: this launch's and what the peer
  // posted for it; a timeout: the latest call this rank and the peer posted, where the rank has a call inbox.
  CallWords mine;
  CallWords theirs;
  uint32_t mine_epoch;
  uint32_t theirs_epoch;
};

// What a wait that passed the timeout does (RuntimeConfig::on_timeout); one enum for the host and the device.
// kFail is 0, so a zeroed RuntimeConfig fails on timeout.
enum class TimeoutPolicy : uint32_t {
  kFail = 0,  // a failure: the error record, then trap or stop (stop_on_failure)
  kWait = 1,  // not a failure: the rank's late report (LateReport) once, and the wait goes on
};

// The rank's report of a wait that passed the timeout under TimeoutPolicy::kWait. `wait` is filled as a timeout's
// error record would be (claimed, valid, rank, peer, op, block, thread, epoch, observed, waited_ns, the calls).
// One report per stall: a late wait publishes only while the report is free (claimed 0) and only if it began after
// the latest report was published (`published_ns`, the device clock): the other waits of a stall already reported
// began before it. The host takes a valid report (prints it), then re-arms it: valid 0, then claimed 0, keeping
// published_ns; so the next late wait, one that began after that stall's report, reports again.
struct LateReport {
  ErrorRecord wait;
  uint64_t published_ns;
};

// One per rank, in pinned mapped host memory (cudaHostAlloc(..., cudaHostAllocMapped)).
struct RuntimeConfig {
  uint64_t timeout_ns;       // 0 means kDefaultTimeoutNs
  const char* call_inbox;    // device memory: the rank's call inbox (call_inbox.cuh), or null
  uint32_t stop_on_failure;  // 1: a failed wait records and gives up instead of trapping (see above)
  uint32_t on_timeout;       // TimeoutPolicy: read by a wait only once it has passed the timeout
  ErrorRecord error;
  LateReport late;
};
static_assert(sizeof(TimeoutPolicy) == sizeof(RuntimeConfig::on_timeout), "on_timeout holds a TimeoutPolicy");

// Identifies a waiter in error records. Plain data, copied inside every device handle.
struct WaitSite {
  RuntimeConfig* config;  // device pointer to the rank's RuntimeConfig; null: default timeout, no record
  int32_t rank;
  int32_t peer;
};

#if defined(__CUDACC__)

// Publishes `r` (block and thread filled in here) as the rank's error record, first caller only. Then traps
// (never returns), or, where the host asked the rank to stop on failure, marks the rank's failed word (unless a
// peer's mark is there already, which names the rank that failed first) and its recorded word, and returns: the
// caller's wait gives up.
// Writes `r` (block and thread filled in here) into `rec`, whose `claimed` the caller won, and publishes it: the
// fields, a system fence, then valid = 1.
__device__ inline void publish_record(ErrorRecord* rec, const ErrorRecord& r) {
  volatile ErrorRecord* v = rec;
  v->rank = r.rank;
  v->peer = r.peer;
  v->op = r.op;
  v->block = static_cast<int32_t>(blockIdx.x);
  v->thread = static_cast<int32_t>(threadIdx.x);
  v->interrupted_op = r.interrupted_op;
  v->epoch = r.epoch;
  v->observed = r.observed;
  v->waited_ns = r.waited_ns;
  v->mine.call = r.mine.call;
  v->mine.count = r.mine.count;
  v->mine.variant = r.mine.variant;
  v->theirs.call = r.theirs.call;
  v->theirs.count = r.theirs.count;
  v->theirs.variant = r.theirs.variant;
  v->mine_epoch = r.mine_epoch;
  v->theirs_epoch = r.theirs_epoch;
  __threadfence_system();
  v->valid = 1u;
  __threadfence_system();
}

__device__ __noinline__ inline void record_failure(const WaitSite& site, const ErrorRecord& r) {
  if (site.config != nullptr) {
    ErrorRecord* rec = &site.config->error;
    const bool stop = *reinterpret_cast<volatile uint32_t*>(&site.config->stop_on_failure) != 0u;
    if (atomicCAS(&rec->claimed, 0u, 1u) == 0u) {
      publish_record(rec, r);
    } else if (!stop) {
      // Another thread is writing the record: trapping now could abort the kernel before it is published,
      // leaving the host an anonymous launch failure. Give the writer a bounded moment (10 ms).
      volatile uint32_t* valid = &rec->valid;
      const uint64_t until = global_timer_ns() + 10000000ull;
      while (*valid == 0u && global_timer_ns() < until) {
      }
    }
    if (stop) {
      const char* inbox = site.config->call_inbox;
      if (inbox != nullptr) {
        if (load_relaxed_sys(failed_word(inbox)) == 0) mark_failed(const_cast<char*>(inbox), site.rank);
        store_relaxed_sys(recorded_word(inbox), 1);
      }
      __threadfence_system();
      return;
    }
  }
  __trap();
}

// The latest calls this rank and `r.peer` posted (call_inbox.cuh) into `r`, for the message: ranks in different
// calls often both wait.
JAX_MSCCLPP_DEVICE_INLINE void record_calls(const WaitSite& site, ErrorRecord& r) {
  const char* inbox = site.config != nullptr ? site.config->call_inbox : nullptr;
  if (inbox != nullptr && r.peer >= 0) {
    r.mine_epoch = latest_call(inbox, site.rank, &r.mine);
    r.theirs_epoch = latest_call(inbox, r.peer, &r.theirs);
  }
}

// The record of a wait at `site` for `epoch` on `peer` that gave up after `waited_ns`, having seen `observed`.
__device__ inline ErrorRecord wait_record(const WaitSite& site, int peer, WaitOp op, uint64_t epoch,
                                          uint64_t observed, uint64_t waited_ns) {
  ErrorRecord r{};
  r.rank = site.rank;
  r.peer = peer;
  r.op = static_cast<uint32_t>(op);
  r.epoch = epoch;
  r.observed = observed;
  r.waited_ns = waited_ns;
  return r;
}

// A wait at `site` that lasted longer than the timeout: fills the rank's error record, then record_failure's end.
__device__ __noinline__ inline void timed_out(const WaitSite& site, WaitOp op, uint64_t epoch, uint64_t observed,
                                              uint64_t waited_ns) {
  ErrorRecord r = wait_record(site, site.peer, op, epoch, observed, waited_ns);
  record_calls(site, r);
  record_failure(site, r);
}

// A wait at `site` that stopped because rank `failed_by` failed the communicator (call_inbox.cuh, the failed word):
// fills the rank's error record, then record_failure's end.
__device__ __noinline__ inline void peer_failed(const WaitSite& site, WaitOp op, uint64_t epoch, uint64_t observed,
                                                uint64_t waited_ns, int failed_by) {
  ErrorRecord r = wait_record(site, failed_by, WaitOp::kPeerFailed, epoch, observed, waited_ns);
  r.interrupted_op = static_cast<uint32_t>(op);
  record_calls(site, r);
  record_failure(site, r);
}

// A wait at `site` (config set) that began at `start_ns` and passed the timeout at `now_ns` under TimeoutPolicy::kWait:
// publishes the rank's late report (LateReport) if it is free and was last published before this wait began. Plain
// reads first, so that the waits of a stall already reported (and a report the host has not taken) cost no atomic
// on host memory. The wait goes on whatever this does.
__device__ __noinline__ inline void report_late(const WaitSite& site, WaitOp op, uint64_t epoch, uint64_t observed,
                                                uint64_t start_ns, uint64_t now_ns) {
  LateReport* late = &site.config->late;
  volatile LateReport* v = late;
  if (v->wait.claimed != 0u || v->published_ns >= start_ns) return;
  if (atomicCAS(&late->wait.claimed, 0u, 1u) != 0u) return;
  if (v->published_ns >= start_ns) {  // another wait of this stall published and the host re-armed in between
    v->wait.claimed = 0u;
    return;
  }
  ErrorRecord r = wait_record(site, site.peer, op, epoch, observed, now_ns - start_ns);
  record_calls(site, r);
  v->published_ns = now_ns;
  publish_record(&late->wait, r);
}

// Spin bound. The clock, the timeout (host memory, at the first check) and the rank's failed word (device memory)
// are read once every 1024 polls, so a wait that succeeds quickly touches none of them; the timeout policy (host
// memory) only once the wait has passed the timeout. The site is only referenced (it must outlive the bound) and
// read on the slow path. A failed rank whose recorded word is set (call_inbox.cuh) gives up without a record: its
// record is claimed.
class SpinBound {
 public:
  JAX_MSCCLPP_DEVICE_INLINE explicit SpinBound(const WaitSite& site) : site_(&site) {}

  // Call once per failed poll: true while the wait goes on. When the rank's failed word is set, it records the
  // failure and traps, or (stop on failure) returns false: the wait gives up. When the wait has lasted longer than
  // the timeout: under TimeoutPolicy::kFail likewise; under kWait it reports the wait late (report_late, once per
  // bound) and goes on. Waits are written `while (!done && bound.tick(...))`.
  [[nodiscard]] JAX_MSCCLPP_DEVICE_INLINE bool tick(WaitOp op, uint64_t epoch, uint64_t observed) {
    if ((++spins_ & 1023u) != 0u) return true;
    const uint64_t now = global_timer_ns();
    if (start_ns_ == 0) {
      start_ns_ = now;
      uint64_t t = 0;
      if (site_->config != nullptr) t = *reinterpret_cast<volatile uint64_t*>(&site_->config->timeout_ns);
      timeout_ns_ = t == 0 ? kDefaultTimeoutNs : t;
    }
    const char* inbox = site_->config != nullptr ? site_->config->call_inbox : nullptr;
    if (inbox != nullptr) {
      const uint64_t failed = load_relaxed_sys(failed_word(inbox));
      if (failed != 0) {
        if (load_relaxed_sys(recorded_word(inbox)) == 0) {
          peer_failed(*site_, op, epoch, observed, now - start_ns_, int(failed) - 1);
        }
        return false;
      }
    }
    if (now - start_ns_ > timeout_ns_ && !late_) {
      const bool waits = site_->config != nullptr &&
                         *reinterpret_cast<volatile uint32_t*>(&site_->config->on_timeout) ==
                             static_cast<uint32_t>(TimeoutPolicy::kWait);
      if (!waits) {
        timed_out(*site_, op, epoch, observed, now - start_ns_);
        return false;
      }
      late_ = true;
      report_late(*site_, op, epoch, observed, start_ns_, now);
    }
    return true;
  }

 private:
  const WaitSite* site_;
  uint32_t spins_ = 0;
  bool late_ = false;  // passed the timeout under TimeoutPolicy::kWait: report_late has run for this wait
  uint64_t start_ns_ = 0;
  uint64_t timeout_ns_ = 0;
};

#endif  // __CUDACC__

}  // namespace jax_mscclpp
