// Host side of the plan executor (kernels/executor/executor.h): a decoded plan (runtime/common/host_plan.h) bound to
// one rank of a RankContext, as the program images the kernel reads (one per thread block, handles resolved).
//
// Channel binding: both ends of a plan channel must use the same RankContext channel index, because a
// semaphore word is keyed by (sender, channel index, kind). For the memory (resp. port) channels between ranks
// a < b, k numbers them in the order of their index on rank a; both ends compute the same k, and the kernel
// uses ctx.mem (resp. ctx.port)[peer * channels_per_peer + k]. The RankContext therefore needs
// channels_per_peer >= ExecutorPlan::channels_per_peer(plan). A memory channel from a rank to itself gets its
// own pair of semaphore words, owned here; a port channel to itself is refused (the proxy serves peers only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/executor.h"
#include "host_plan.h"
#include "memory.h"
#include "rank_context.h"

namespace jax_mscclpp::cuda {

class ExecutorPlan {
 public:
  // Checks `plan` for what the executor needs (channel kinds per operation, remote references in scratch,
  // chunk ranges, operand counts, shared memory) and uploads rank `ctx.rank()`'s tables to ctx's device, with
  // the channel handles of `device_ctx` (the CollectiveContext built over ctx, whose handle tables must not
  // change while this plan is used) resolved into them. Throws std::invalid_argument naming the rank, thread
  // block and operation at fault. threads: CUDA threads per block (0: 512).
  ExecutorPlan(std::shared_ptr<const host::HostPlan> plan, const RankContext& ctx,
               const CollectiveContext& device_ctx, int threads = 0);
  ExecutorPlan(const ExecutorPlan&) = delete;
  ExecutorPlan& operator=(const ExecutorPlan&) = delete;

  const DevicePlan& device_plan() const { return device_; }
  const host::HostPlan& plan() const { return *plan_; }
  int rank() const { return device_.rank; }

  // The smallest registered scratch with which `block_count` elements per block of `dtype` run in one launch.
  uint64_t scratch_bytes(uint64_t block_count, int32_t dtype) const {
    return plan_scratch_bytes_for(device_, block_count, dtype);
  }

  // Channels per peer a RankContext needs to run `plan` (at least 1).
  static int channels_per_peer(const host::HostPlan& plan);
  // Whether `plan` has port channels (the context then needs PortChannels built over its scratch).
  static bool uses_port_channels(const host::HostPlan& plan);
  // Most scratch staging chunks any rank of `plan` needs (port puts from input/output).
  static int staging_chunks(const host::HostPlan& plan);
  // The smallest registered scratch with which every rank of `plan` runs `block_count` elements per block of
  // `dtype` in one launch (larger messages are pipelined).
  static uint64_t scratch_bytes_for(const host::HostPlan& plan, uint64_t block_count, int32_t dtype);

 private:
  std::shared_ptr<const host::HostPlan> plan_;
  DevicePlan device_{};
  DeviceBuffer images_, self_semaphores_;
};

// The RankContext channel index (k above) of every channel endpoint of every rank: [rank][channel], -1 for
// switch and self channels. Throws std::invalid_argument when endpoints do not pair up.
std::vector<std::vector<int>> plan_channel_indices(const host::HostPlan& plan);

}  // namespace jax_mscclpp::cuda
