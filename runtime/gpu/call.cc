// GpuRank::run (call.h): refusal, the order of calls across streams, and the launch of every kind of call on a
// context that names its outputs (their poisoning by its kernels, where failing kernels stop).
#include "call.h"

#include <mutex>
#include <stdexcept>
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

// Whether `stream` is being captured into a graph (an answer other than "none" counts as capturing).
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

CallResult launch_result(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return {};
  CallResult result;
  result.status = CallStatus::kLaunchFailed;
  result.error = error;
  result.message = std::string("launching ") + what + " failed: " + cudaGetErrorString(error) + launch_hint(error);
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
  // Recorded after a failed launch too: pieces launched before the one that failed may be enqueued, and the next
  // call and the end of the rank's issued work (issued_work) follow them all the same.
  const cudaError_t recorded = order_.after(stream);
  if (!launched.launched() || recorded == cudaSuccess) return launched;
  return launch_result(recorded, "the record of the call's end (for a call on another stream)");
}

cudaError_t GpuRank::issued_work() {
  std::lock_guard<std::mutex> lock(order_mutex_);
  return order_.eager_work();
}

CollectiveContext GpuRank::call_context(void* out, uint64_t bytes, void* second_out, uint64_t second_bytes) const {
  CollectiveContext c = device_;
  if (!ctx_->config().stops_on_failure()) return c;
  c.failed_outputs.failed = rank_failed_word(device_);
  c.failed_outputs.out[0] = static_cast<char*>(out);
  c.failed_outputs.bytes[0] = out == nullptr ? 0 : bytes;
  c.failed_outputs.out[1] = static_cast<char*>(second_out);
  c.failed_outputs.bytes[1] = second_out == nullptr ? 0 : second_bytes;
  return c;
}

CallResult GpuRank::launch(const Call& call, cudaStream_t stream) {
  // One launch per call kind (per piece, where a call is cut into pieces), its outputs in the context it runs on.
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
            const CollectiveContext ctx = call_context(c.out, c.block_count * dp.output_blocks * element);
            if (c.receives_nothing)
              if (const cudaError_t zeroed = cudaMemsetAsync(c.out, 0, c.block_count * element, stream);
                  zeroed != cudaSuccess)
                return launch_result(zeroed, "the zeros of a permutation's plan");
            return launch_result(launch_plan(ctx, dp, c.in, c.out, c.block_count, c.dtype, c.op, stream),
                                 [&] { return plan_where(c.plan_id) + " ('" + bound->plan().name + "')"; });
          }
          // Between ranks of one process the bandwidth-bound calls run in place on the posted buffers.
          const int32_t algorithm =
              c.peers_reach_buffers
                  ? direct_algorithm(device_, c.collective, c.algorithm, c.in, c.out, c.block_count, c.dtype, c.op)
                  : c.algorithm;
          const uint64_t out_bytes = output_blocks(c.collective, size_t(device_.nranks)) * c.block_count * element;
          // Between ranks of several processes, the same calls where every rank's buffers lie in allocations its
          // peers mapped (the ranks agree per call, allocation_exchange.h); else through scratch. Never in a stream
          // capture: a recorded call replays without its agreement, and a process re-records it (XLA updating its
          // command buffer) when its own buffers moved, whatever its peers do. Whether a call is recorded is the
          // same in every process (the program's), so every rank decides alike.
          if (AllocationExchange* exchange = c.peers_reach_buffers ? ctx_->allocation_exchange() : nullptr;
              exchange != nullptr && !capturing(stream) &&
              in_place_algorithm(device_, c.collective, c.algorithm, c.in, c.out, c.block_count, c.dtype, c.op) ==
                  codes::kInPlace) {
            const uint64_t in_bytes = input_blocks(c.collective, size_t(device_.nranks)) * c.block_count * element;
            InPlaceBuffers views{};
            bool agreed = false;
            try {
              agreed = exchange->agree(c.in, in_bytes, c.out, out_bytes, ctx_->config().timeout_seconds(), views);
            } catch (const std::runtime_error& error) {
              return {CallStatus::kLaunchFailed, cudaErrorTimeout, FailureKind::kTimedOut,
                      std::string(collective_name(static_cast<Collective>(c.collective))) +
                          " in place between processes: " + error.what()};
            }
            (agreed ? in_place_between_processes_ : through_scratch_between_processes_).fetch_add(1);
            if (agreed) {
              CallResult result =
                  launch_result(launch_in_place_views(call_context(c.out, out_bytes), c.collective, views,
                                                      c.block_count, c.dtype, c.op, stream, c.max_blocks),
                                [&] {
                                  return std::string(collective_name(static_cast<Collective>(c.collective))) +
                                         " in place between processes";
                                });
              result.in_place = result.launched();
              return result;
            }
          }
          CallResult result =
              launch_result(launch_collective(call_context(c.out, out_bytes), c.collective, algorithm, c.in, c.out,
                                              c.block_count, c.dtype, c.op, stream, c.max_blocks),
                            [&] {
                              return std::string(collective_name(static_cast<Collective>(c.collective))) +
                                     (algorithm == codes::kInPlace ? " in place" : "");
                            });
          result.in_place = result.launched() && algorithm == codes::kInPlace;
          return result;
        } else if constexpr (std::is_same_v<Kind, PermuteCall>) {
          return launch_result(launch_permute(call_context(c.out, c.block_count * dtype_bytes(c.dtype)), c.algorithm,
                                              c.in, c.out, c.block_count, c.dtype, c.send_to, c.recv_from, stream,
                                              c.max_blocks),
                               "permute");
        } else if constexpr (std::is_same_v<Kind, PointToPointCall>) {
          if (c.count == 0) return {};
          // The receives are the outputs: launch_p2p_group's kernel poisons them (collective.h).
          return launch_result(launch_p2p_group(call_context(nullptr, 0), c.messages, c.count, stream),
                               "a point-to-point group");
        } else if constexpr (std::is_same_v<Kind, InPlaceCall>) {
          const uint64_t out_bytes =
              output_blocks(c.collective, size_t(device_.nranks)) * c.block_count * dtype_bytes(c.dtype);
          return launch_result(launch_in_place(call_context(c.buffers.out[device_.rank], out_bytes), c.collective,
                                               c.buffers, c.block_count, c.dtype, c.op, stream, c.max_blocks),
                               [&] {
                                 return std::string(collective_name(static_cast<Collective>(c.collective))) +
                                        " in place";
                               });
        } else if constexpr (std::is_same_v<Kind, FoldCall>) {
          const uint64_t* failed = ctx_->config().stops_on_failure() ? rank_failed_word(device_) : nullptr;
          return launch_result(launch_fold_blocks(c.blocks, c.block_stride, c.nblocks, c.out, c.count, c.element, c.op,
                                                  c.scalar, c.divisor, failed, stream),
                               "a local fold");
        } else if constexpr (std::is_same_v<Kind, RaggedAllToAllCall>) {
          return launch_result(
              launch_ragged_all_to_all(call_context(c.ragged.output, c.ragged.output_rows * c.ragged.row_bytes),
                                       c.ragged, stream),
              "ragged_all_to_all");
        } else {
          const uint64_t bytes = c.call.count * dtype_bytes(c.dtype);
          const CollectiveContext ctx = call_context(c.call.new_residual, bytes, c.call.normed, bytes);
          return launch_result(launch_all_reduce_epilogue(ctx, c.kind, c.call, c.dtype, stream),
                               "the fused all_reduce");
        }
      },
      call);
}

}  // namespace jax_mscclpp::cuda
