// A virtual rank for execution plans: a plan bound to the GpuRank (GpuRank::bind_plan, as the JAX path binds
// one) and launched by the plan executor on the rank's input and output. Python (tests/harness/plan_ranks.py)
// creates N of them on one GPU, exchanges their endpoints, binds a plan and launches every rank before
// synchronizing any. The same ranks also run the hand-written collectives (launch_collective) on the same
// context, so the two can be compared on equal terms.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "executor_plan.h"
#include "host_plan.h"
#include "virtual_rank.h"

namespace jax_mscclpp::cuda {

class ExecutorRank : public VirtualRank {
 public:
  using VirtualRank::VirtualRank;
  ~ExecutorRank() override;

  // Binds `plan` in place of the one bound before (threads per block: 0 for the executor's default). Throws
  // std::invalid_argument as GpuRank::bind_plan does.
  void set_plan(std::shared_ptr<const host::HostPlan> plan, int threads);
  const ExecutorPlan* plan() const { return plan_; }
  const CollectiveContext& context() const { return gpu().context(); }

  // One call of the bound plan on this rank's stream (asynchronous).
  void launch_plan(uint64_t block_count, int32_t dtype, int32_t op);
  // One call of a hand-written collective (kernels/collectives) on the same context.
  void launch_collective(int32_t collective, int32_t algorithm, uint64_t block_count, int32_t dtype, int32_t op);

 private:
  void release() override { plan_ = nullptr; }
  void check_sizes(int in_blocks, int out_blocks, uint64_t block_count, int32_t dtype) const;

  const ExecutorPlan* plan_ = nullptr;  // owned by the GpuRank
  int64_t next_plan_id_ = 0;
};

// What time_calls() launches on every rank.
struct TimedCall {
  int32_t kind = 0;  // 0: the bound plan; 1: launch_collective
  int32_t collective = 0;
  int32_t algorithm = 0;
  uint64_t block_count = 0;
  int32_t dtype = 0;
  int32_t op = 0;
};

// Milliseconds per call, one value per sample: `repeats` calls on every rank are queued behind launch gates
// (launch_gate.h) and released together, so the device runs them back to back with no host gaps;
// events on rank 0's stream (joined by every other rank's) time them.
std::vector<float> time_calls(const std::vector<ExecutorRank*>& ranks, const TimedCall& call, int repeats,
                              int samples);

}  // namespace jax_mscclpp::cuda
