// GPU communicators of the JAX integration: per (mesh, axes) communicator id, one GpuRank per local device
// that takes part. Python drives setup (ranks, endpoint exchange through JAX's coordination service when the
// mesh spans processes); the CUDA FFI handlers look a rank up by (communicator id, device ordinal).
//
// Setup: create_rank per local device, then the runtime's one setup of them (rank_setup.h, connect_all: endpoint
// exchange, connect, finalize), then bind_plan() for each registered execution plan the JAX path lowers to
// (jax_mscclpp/plans.py). Thread-safe: handlers run on one host thread per device.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "call.h"
#include "channel_tables.h"
#include "collectives/collective.h"
#include "executor_plan.h"
#include "host_plan.h"
#include "issue_order.h"
#include "memory.h"
#include "rank_context.h"

namespace jax_mscclpp::cuda {

class GpuRank {
 public:
  GpuRank(const RankOptions& options, bool port_channels);
  std::string endpoint() const { return ctx_->endpoint(); }
  void connect(int peer, const std::string& endpoint) { ctx_->connect(peer, endpoint); }
  // Builds every channel to the peers (all connected) and uploads their device handles (channel_tables.h: a
  // world of more than kMaxSwitchMembers ranks has no SwitchChannel). `placement` (codes.def: kOwnGpu, or
  // kSharedGpu where the communicator's ranks share a GPU) selects the kernels' protocol rows.
  void finalize(int32_t placement);
  bool ready() const { return ready_; }
  const CollectiveContext& context() const { return device_; }
  RankContext& rank_context() { return *ctx_; }
  bool port_channels() const { return port_channels_; }
  // The one call entry of both frontends (call.h): refuses the call where an earlier kernel of this rank failed
  // and stopped, else launches it on `stream`, after the rank's previous call where that was on another stream
  // (issue_order.h), its kernels poisoning its outputs where failing kernels stop. Needs finalize().
  CallResult run(const Call& call, cudaStream_t stream);
  // Whether the work of every call run() issued outside a stream capture has ended on the device (issue_order.h,
  // IssueOrder::eager_work: the latest such call's end event, which completes after every call issued before it,
  // whatever its stream): cudaSuccess, cudaErrorNotReady while some still runs, else the error the query answered.
  // Never blocks.
  cudaError_t issued_work();
  // Why every call is refused (kRefused, with the failure's record), or kLaunched where calls may run.
  CallResult refusal() const;

  // Makes execution plan `plan_id` runnable on this rank: builds its executor tables over this rank's
  // channels (context()). Once per id: binding an id again does nothing. Needs finalize(). Throws
  // std::invalid_argument when the plan is for another world size, its channel endpoints do not pair up, it
  // needs more channels per peer than the rank has, or port channels the rank was created without.
  // threads: CUDA threads per block of the plan's kernel (0: the executor's default).
  void bind_plan(int64_t plan_id, std::shared_ptr<const host::HostPlan> plan, int threads = 0);
  // The plan bound as `plan_id` (valid as long as this rank), or nullptr.
  const ExecutorPlan* plan(int64_t plan_id) const;
  // The name of the bound plan with this fingerprint (DevicePlan::fingerprint), "" when none has it.
  std::string plan_name(uint32_t fingerprint) const;
  // Calls between ranks of several processes that could run in place (allocation_exchange.h): how many did, and
  // how many copied through scratch because some rank's buffers were not reachable.
  uint64_t in_place_between_processes() const { return in_place_between_processes_.load(); }
  uint64_t through_scratch_between_processes() const { return through_scratch_between_processes_.load(); }
  // Why calls between processes never run in place on this rank ("" where they may).
  std::string in_place_between_processes_absence() const { return ctx_->allocation_exchange_absence(); }

 private:
  // The context a call's kernels run on: context(), and where this rank's failing kernels stop rather than trap,
  // the call's outputs (`bytes` at `out`, and `second_bytes` at `second_out`; null: none) as the outputs its kernels
  // poison should the rank have failed by their end (collectives/collective.h, FailedOutputs).
  CollectiveContext call_context(void* out, uint64_t bytes, void* second_out = nullptr,
                                 uint64_t second_bytes = 0) const;
  // run's launch, for each kind of call.
  CallResult launch(const Call& call, cudaStream_t stream);

  std::unique_ptr<RankContext> ctx_;
  bool port_channels_;
  bool ready_ = false;
  ChannelTables tables_;
  CollectiveContext device_{};
  std::mutex order_mutex_;
  IssueOrder order_;
  std::atomic<uint64_t> in_place_between_processes_{0};
  std::atomic<uint64_t> through_scratch_between_processes_{0};
  // Declared last: freed first, while the channel tables their device tables point into still exist.
  mutable std::mutex plans_mutex_;
  std::map<int64_t, std::unique_ptr<ExecutorPlan>> plans_;
};

class GpuCommunicator {
 public:
  explicit GpuCommunicator(int64_t id);
  ~GpuCommunicator();
  int64_t id() const { return id_; }

  // The rank on `device` (not yet connected: rank_setup.h, connect_all).
  GpuRank& create_rank(int device, const RankOptions& options, bool port_channels);
  GpuRank* rank(int device);  // nullptr if this process holds no rank on `device`
  template <class Visit>
  void for_each_rank(Visit visit) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, rank] : ranks_) visit(*rank);
  }
  // One line per rank whose kernels recorded a timeout (rank, peer, operation, epoch), else empty.
  std::vector<std::string> errors();
  // Whether a rank's kernel recorded a failure and stopped rather than trapped (RankOptions::stop_on_failure).
  bool stopped_on_failure();
  // Every rank's kernels launched from now on wait at most `seconds`.
  void set_timeout_seconds(double seconds);

 private:
  void watch();  // reports timeout records on stderr as soon as a kernel writes one

  int64_t id_;
  std::mutex mutex_;
  std::map<int, std::unique_ptr<GpuRank>> ranks_;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

std::shared_ptr<GpuCommunicator> create_gpu_communicator(int64_t id);
std::shared_ptr<GpuCommunicator> find_gpu_communicator(int64_t id);
bool destroy_gpu_communicator(int64_t id);
// Copies the process's timeout (runtime_settings.h) into every rank of every live GPU communicator. Ranks take
// it when they are created; this follows a change made afterwards.
void apply_timeout_to_gpu_communicators();

}  // namespace jax_mscclpp::cuda
