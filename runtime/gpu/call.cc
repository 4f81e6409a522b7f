// GpuRank::run (call.h): refusal, the order of calls across streams, launch, poisoning, for every kind of call.
#include "call.h"

#include <mutex>
#include <string>
#include <type_traits>

#include "collective_types.h"
#include "communicator.h"
#include "executor/executor.h"
#include "jax_mscclpp/block_layout.h"
#include "jax_mscclpp/codes.h"

namespace jax_mscclpp::cuda {
namespace {

// What a launcher's cudaErrorInvalidValue / cudaErrorNotReady mean (collective.h, executor.h), for the message.
const char* launch_hint(cudaError_t error) {
  switch (error) {
    case cudaErrorInvalidValue:
      return " (an unsupported dtype, op or size, or a scratch too small for one piece: raise the communicator's "
             "scratch bytes)";
    case cudaErrorNotReady:
      return " (the algorithm needs port channels, a switch channel or point-to-point resources the communicator "
             "does not have)";
    default:
      return "";
  }
}

std::string plan_where(int64_t plan_id) { return "plan " + std::to_string(plan_id); }

}  // namespace

CallResult launch_result(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return {};
  CallResult result;
  result.status = CallStatus::kLaunchFailed;
  result.error = error;
  result.message = "launching " + what + " failed: " + cudaGetErrorString(error) + launch_hint(error);
  return result;
}

CallResult GpuRank::refusal() const {
  const RuntimeConfigHost& config = ctx_->config();
  if (!config.stopped_on_failure()) return {};
  CallResult result;
  result.status = CallStatus::kRefused;
  const WaitOp op = config.failure_op();
  const bool out_of_step = op == WaitOp::kCallMismatch || op == WaitOp::kPeerFailed ||
                           op == WaitOp::kRaggedBounds || op == WaitOp::kRaggedSizes;
  result.failure = out_of_step ? FailureKind::kOutOfStep : FailureKind::kTimedOut;
  result.message = "is unusable after an earlier failure: " +
                   config.error_message([this](uint32_t f) { return plan_name(f); }) +
                   "; the outputs of the call that failed are not valid";
  return result;
}

CallResult GpuRank::run(const Call& call, cudaStream_t stream) {
  if (CallResult refused = refusal(); !refused.launched()) return refused;
  std::lock_guard<std::mutex> lock(order_mutex_);
  if (CallResult joined = launch_result(order_.before(stream), "the wait for the previous call (on another stream)");
      !joined.launched())
    return joined;
  CallResult launched = launch(call, stream);
  if (!launched.launched()) return launched;
  return launch_result(order_.after(stream), "the record of the call's end (for a call on another stream)");
}

CallResult GpuRank::launch(const Call& call, cudaStream_t stream) {
  // The launch, then the poisoning of the outputs it writes.
  return std::visit(
      [&](const auto& c) -> CallResult {
        using Kind = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<Kind, CollectiveCall>) {
          const uint64_t element = dtype_bytes(c.dtype);
          if (c.algorithm == codes::kPlan) {
            const ExecutorPlan* bound = plan(c.plan_id);
            if (bound == nullptr)
              return {CallStatus::kPlanNotBound, cudaSuccess, FailureKind::kOutOfStep,
                      plan_where(c.plan_id) + " is not bound (Communicator.bind_plan)"};
            const DevicePlan& dp = bound->device_plan();
            const size_t world = size_t(device_.nranks);
            if (size_t(dp.input_blocks) != input_blocks(c.collective, world) ||
                size_t(dp.output_blocks) != output_blocks(c.collective, world))
              return {CallStatus::kPlanMismatch, cudaSuccess, FailureKind::kOutOfStep,
                      plan_where(c.plan_id) + " has " + std::to_string(dp.input_blocks) + " input and " +
                          std::to_string(dp.output_blocks) + " output blocks; the call's " +
                          collective_name(static_cast<Collective>(c.collective)) + " has " +
                          std::to_string(input_blocks(c.collective, world)) + " and " +
                          std::to_string(output_blocks(c.collective, world))};
            CallResult launched = launch_result(
                launch_plan(device_, dp, c.in, c.out, c.block_count, c.dtype, c.op, stream),
                plan_where(c.plan_id) + " ('" + bound->plan().name + "')");
            if (!launched.launched()) return launched;
            return launch_result(poison_outputs_if_failed(c.out, c.block_count * dp.output_blocks * element, stream),
                                 "the failed-output check");
          }
          // Between ranks of one process the bandwidth-bound calls run in place on the posted buffers.
          const int32_t algorithm =
              c.peers_reach_buffers
                  ? direct_algorithm(device_, c.collective, c.algorithm, c.in, c.out, c.block_count, c.dtype, c.op)
                  : c.algorithm;
          CallResult launched =
              launch_result(launch_collective(device_, c.collective, algorithm, c.in, c.out, c.block_count, c.dtype,
                                              c.op, stream, c.max_blocks),
                            std::string(collective_name(static_cast<Collective>(c.collective))) +
                                (algorithm == codes::kInPlace ? " in place" : ""));
          if (!launched.launched()) return launched;
          const uint64_t out_bytes = output_blocks(c.collective, size_t(device_.nranks)) * c.block_count * element;
          return launch_result(poison_outputs_if_failed(c.out, out_bytes, stream), "the failed-output check");
        } else if constexpr (std::is_same_v<Kind, PermuteCall>) {
          CallResult launched = launch_result(launch_permute(device_, c.algorithm, c.in, c.out, c.block_count, c.dtype,
                                                             c.send_to, c.recv_from, stream, c.max_blocks),
                                              "permute");
          if (!launched.launched()) return launched;
          return launch_result(poison_outputs_if_failed(c.out, c.block_count * dtype_bytes(c.dtype), stream),
                               "the failed-output check");
        } else if constexpr (std::is_same_v<Kind, PointToPointCall>) {
          if (c.count == 0) return {};
          CallResult launched =
              launch_result(launch_p2p_group(device_, c.messages, c.count, stream), "a point-to-point group");
          if (!launched.launched()) return launched;
          for (int i = 0; i < c.count; ++i) {
            if (!c.messages[i].receive) continue;
            CallResult poisoned = launch_result(
                poison_outputs_if_failed(c.messages[i].buffer, c.messages[i].bytes, stream), "the failed-output check");
            if (!poisoned.launched()) return poisoned;
          }
          return {};
        } else if constexpr (std::is_same_v<Kind, InPlaceCall>) {
          CallResult launched = launch_result(
              launch_in_place(device_, c.collective, c.buffers, c.block_count, c.dtype, c.op, stream, c.max_blocks),
              std::string(collective_name(static_cast<Collective>(c.collective))) + " in place");
          if (!launched.launched()) return launched;
          const uint64_t out_bytes =
              output_blocks(c.collective, size_t(device_.nranks)) * c.block_count * dtype_bytes(c.dtype);
          return launch_result(poison_outputs_if_failed(c.buffers.out[device_.rank], out_bytes, stream),
                               "the failed-output check");
        } else if constexpr (std::is_same_v<Kind, FoldCall>) {
          CallResult launched =
              launch_result(launch_fold_blocks(c.blocks, c.block_stride, c.nblocks, c.out, c.count, c.element, c.op,
                                               c.scalar, c.divisor, stream),
                            "a local fold");
          if (!launched.launched()) return launched;
          return launch_result(
              poison_outputs_if_failed(c.out, c.count * static_cast<uint64_t>(fold_element_bytes(c.element)), stream),
              "the failed-output check");
        } else if constexpr (std::is_same_v<Kind, RaggedAllToAllCall>) {
          CallResult launched =
              launch_result(launch_ragged_all_to_all(device_, c.ragged, stream), "ragged_all_to_all");
          if (!launched.launched()) return launched;
          return launch_result(poison_outputs_if_failed(c.ragged.output, c.ragged.output_rows * c.ragged.row_bytes,
                                                        stream),
                               "the failed-output check");
        } else {
          CallResult launched = launch_result(launch_all_reduce_epilogue(device_, c.kind, c.call, c.dtype, stream),
                                              "the fused all_reduce");
          if (!launched.launched()) return launched;
          const uint64_t bytes = c.call.count * dtype_bytes(c.dtype);
          CallResult poisoned =
              launch_result(poison_outputs_if_failed(c.call.new_residual, bytes, stream), "the failed-output check");
          if (!poisoned.launched() || c.call.normed == nullptr) return poisoned;
          return launch_result(poison_outputs_if_failed(c.call.normed, bytes, stream), "the failed-output check");
        }
      },
      call);
}

}  // namespace jax_mscclpp::cuda
