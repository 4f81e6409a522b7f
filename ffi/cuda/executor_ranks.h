// Virtual ranks for execution plans: one rank's RankContext, input/output buffers, stream, channel tables,
// CollectiveContext and ExecutorPlan. Python (jax_mscclpp/testing/plan_ranks.py) creates N of them on one GPU,
// exchanges their endpoints, binds a plan and launches every rank before synchronizing any. The same ranks also
// run the hand-written collectives (launch_collective), so the two can be compared on equal terms.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "executor_plan.h"
#include "host_plan.h"
#include "memory.h"
#include "rank_context.h"

namespace jax_mscclpp::cuda {

class ExecutorRank {
 public:
  enum Buffer { kInput = 0, kOutput = 1, kScratch = 2 };

  ExecutorRank(const RankOptions& opts, size_t input_bytes, size_t output_bytes, bool port_channels);
  ~ExecutorRank();
  ExecutorRank(const ExecutorRank&) = delete;
  ExecutorRank& operator=(const ExecutorRank&) = delete;

  int rank() const { return opts_.rank; }
  int device() const { return opts_.device; }
  int nranks() const { return opts_.nranks; }
  std::string endpoint() const;
  void connect(int peer, const std::string& endpoint);
  // After every peer is connected: channel tables (memory, port if asked, emulated switch) and the context.
  void build();
  // Binds `plan` (threads per block: 0 for the default).
  void set_plan(std::shared_ptr<const host::HostPlan> plan, int threads);
  const ExecutorPlan* plan() const { return plan_.get(); }
  const CollectiveContext& context() const { return context_; }
  uint64_t scratch_bytes() const { return context_.scratch_bytes; }

  void upload(int which, size_t offset, const std::string& data);
  std::string download(int which, size_t offset, size_t n);
  void fill(int which, int byte_value);

  // One call of the bound plan on this rank's stream (asynchronous).
  void launch_plan(uint64_t block_count, int32_t dtype, int32_t op);
  // One call of a hand-written collective (kernels/collectives) on the same context.
  void launch_collective(int32_t collective, int32_t algorithm, uint64_t block_count, int32_t dtype, int32_t op);
  // Waits for the stream; throws std::runtime_error naming the CUDA error and the rank's timeout record.
  void synchronize();
  uint64_t epoch();

  cudaStream_t stream() const { return stream_; }
  double timeout_seconds() const { return ctx_->config().timeout_seconds(); }
  void set_timeout_seconds(double s) { ctx_->config().set_timeout_seconds(s); }
  std::string error_message() const { return ctx_ ? ctx_->config().error_message() : std::string(); }
  void close();

 private:
  char* buffer(int which, size_t offset, size_t n) const;
  void check_sizes(int32_t collective, int in_blocks, int out_blocks, uint64_t block_count, int32_t dtype) const;

  RankOptions opts_;
  bool port_;
  std::unique_ptr<RankContext> ctx_;
  DeviceBuffer input_, output_, mem_table_, port_table_;
  CollectiveContext context_{};
  std::unique_ptr<ExecutorPlan> plan_;
  cudaStream_t stream_ = nullptr;
  bool built_ = false;
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
// (kernels/executor/gate.h) and released together, so the device runs them back to back with no host gaps;
// events on rank 0's stream (joined by every other rank's) time them.
std::vector<float> time_calls(const std::vector<ExecutorRank*>& ranks, const TimedCall& call, int repeats,
                              int samples);

}  // namespace jax_mscclpp::cuda
