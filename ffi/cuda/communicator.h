// GPU communicators of the JAX integration: per (mesh, axes) communicator id, one GpuRank per local device
// that takes part. Python drives setup (ranks, endpoint exchange through JAX's coordination service when the
// mesh spans processes); the CUDA FFI handlers look a rank up by (communicator id, device ordinal).
//
// Setup, per local device:  create_rank -> endpoint bytes; connect(peer, endpoint) for every peer of its
// group; finalize() builds the channels and the CollectiveContext; then bind_plan() for each registered
// execution plan the JAX path lowers to (jax_mscclpp/plans.py). Thread-safe: handlers run on one host thread
// per device.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collective.h"
#include "executor_plan.h"
#include "host_plan.h"
#include "memory.h"
#include "rank_context.h"

namespace jax_mscclpp::cuda {

class GpuRank {
 public:
  GpuRank(const RankOptions& options, bool port_channels);
  std::string endpoint() const { return ctx_->endpoint(); }
  void connect(int peer, const std::string& endpoint) { ctx_->connect(peer, endpoint); }
  // Builds every channel to the connected peers and uploads their device handles.
  void finalize();
  bool ready() const { return ready_; }
  const CollectiveContext& context() const { return device_; }
  RankContext& rank_context() { return *ctx_; }

  // Makes execution plan `plan_id` runnable on this rank: builds its executor tables over this rank's
  // channels (context()). Once per id: binding an id again does nothing. Needs finalize(). Throws
  // std::invalid_argument when the plan is for another world size, its channel endpoints do not pair up, it
  // needs more channels per peer than the rank has, or port channels the rank was created without.
  void bind_plan(int64_t plan_id, std::shared_ptr<const host::HostPlan> plan);
  // The plan bound as `plan_id` (valid as long as this rank), or nullptr.
  const ExecutorPlan* plan(int64_t plan_id) const;

 private:
  std::unique_ptr<RankContext> ctx_;
  bool port_channels_;
  bool ready_ = false;
  DeviceBuffer memory_channels_, port_channel_handles_, stream_semaphores_;
  CollectiveContext device_{};
  // Declared last: freed first, while the channel tables their device tables point into still exist.
  mutable std::mutex plans_mutex_;
  std::map<int64_t, std::unique_ptr<ExecutorPlan>> plans_;
};

class GpuCommunicator {
 public:
  explicit GpuCommunicator(int64_t id);
  ~GpuCommunicator();
  int64_t id() const { return id_; }

  std::string create_rank(int device, const RankOptions& options, bool port_channels);
  GpuRank* rank(int device);  // nullptr if this process holds no rank on `device`
  // One line per rank whose kernels recorded a timeout (rank, peer, operation, epoch), else empty.
  std::vector<std::string> errors();

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

}  // namespace jax_mscclpp::cuda
