// Host owner of one rank's RuntimeConfig (kernels/include/jax_mscclpp/error_record.cuh): the device-visible
// timeout, whether a wait past it fails (TimeoutPolicy), whether a failing kernel traps or stops, the error record it
// fills first, and the late report of a wait that passed the timeout without failing.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "jax_mscclpp/error_record.cuh"

namespace jax_mscclpp::cuda {

// The name of the plan bound with this fingerprint (jax_mscclpp/call_inbox.cuh), "" when none is.
using PlanNames = std::function<std::string(uint32_t fingerprint)>;

// One line: for a timeout, rank, peer, operation, epoch and the values seen; for a call mismatch, both calls
// (plans named by `plan_name` where it knows them). Empty if the record is not valid.
std::string describe_error(const ErrorRecord& rec, uint64_t timeout_ns, const PlanNames& plan_name = {});

// One line for a late report's record (LateReport::wait): the rank, the peer (or the proxy), the operation, the
// seconds waited past the timeout `timeout_ns`, the values seen and, where posted, both ranks' latest calls. Empty if
// the record is not valid.
std::string describe_late(const ErrorRecord& rec, uint64_t timeout_ns, const PlanNames& plan_name = {});

class RuntimeConfigHost {
 public:
  // Pinned, mapped host memory; `timeout_s` <= 0 means the process's setting (runtime_settings.h).
  // `stop_on_failure`: a failing kernel of this rank stops (its waits give up) rather than traps.
  // `on_timeout`: whether a wait past the timeout fails or goes on, reported late (error_record.cuh).
  RuntimeConfigHost(int rank, double timeout_s, bool stop_on_failure,
                    TimeoutPolicy on_timeout = TimeoutPolicy::kFail);
  ~RuntimeConfigHost();
  RuntimeConfigHost(const RuntimeConfigHost&) = delete;
  RuntimeConfigHost& operator=(const RuntimeConfigHost&) = delete;

  RuntimeConfig* device() const { return device_; }
  int rank() const { return rank_; }
  WaitSite site(int peer) const { return WaitSite{device_, rank_, peer}; }

  double timeout_seconds() const;
  // Takes effect for waits that start after the store is visible (kernels launched afterwards).
  void set_timeout_seconds(double s);

  // The rank's call inbox (device memory), which a timed-out wait reads to say which calls the ranks were in.
  void set_call_inbox(const char* inbox);

  bool stops_on_failure() const { return host_->stop_on_failure != 0; }
  // From now on a failing wait of this rank stops rather than traps, kernels already running included (they read
  // the word at every slow-path check); for an abort of the rank's communicator (nccl/runtime_communicator.h).
  void stop_on_failure_now();
  bool has_error() const;
  // A kernel of this rank failed and stopped: the context is usable, the rank's communicator is not.
  bool stopped_on_failure() const { return stops_on_failure() && has_error(); }
  // What failed (the record's WaitOp); kNone without a record.
  WaitOp failure_op() const;
  std::string error_message(const PlanNames& plan_name = {}) const;
  void clear_error();

  TimeoutPolicy timeout_policy() const;
  // The late report a wait of this rank published (TimeoutPolicy::kWait), as describe_late words it, once: taking it
  // re-arms the report (LateReport), so this returns it to one caller, and "" until a later late wait publishes
  // again. Any thread may call it; "" when there is none. Never a failure: nothing else changes.
  std::string take_late_report(const PlanNames& plan_name = {});

 private:
  int rank_;
  RuntimeConfig* host_ = nullptr;
  RuntimeConfig* device_ = nullptr;
  std::mutex late_mutex_;  // take_late_report: one taker at a time
};

}  // namespace jax_mscclpp::cuda
