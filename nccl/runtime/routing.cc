#include "routing.h"

#include <algorithm>

#include "dtype_codes.h"
#include "jax_mscclpp/block_layout.h"
#include "jax_mscclpp/codes.h"
#include "selection.h"

namespace jax_mscclpp::nccl {
namespace {

Route refuse(ncclResult_t code, std::string reason) {
  Route r;
  r.kind = Route::kRefuse;
  r.refusal = code;
  r.reason = std::move(reason);
  return r;
}
Route of_kind(Route::Kind kind) {
  Route r;
  r.kind = kind;
  return r;
}

bool is_point_to_point(ApiFunction f) { return f == ApiFunction::ncclSend || f == ApiFunction::ncclRecv; }
bool has_root(ApiFunction f) {
  return f == ApiFunction::ncclBroadcast || f == ApiFunction::ncclBcast || f == ApiFunction::ncclReduce ||
         f == ApiFunction::ncclGather || f == ApiFunction::ncclScatter;
}
bool reduces(ApiFunction f) {
  return f == ApiFunction::ncclAllReduce || f == ApiFunction::ncclReduceScatter || f == ApiFunction::ncclReduce;
}

// The fold of a reduction of `op`'s dtype and reduction (a built-in one or one of the communicator's).
Route composed_reduction(const RouteContext& context, const Operation& op) {
  const std::optional<FoldElement> element = fold_element(op.dtype);
  if (!element) return refuse(ncclInvalidArgument, "data type " + std::to_string(op.dtype) + " is not NCCL's");
  Fold fold{*element, FoldOp::kSum, {}};
  if (const std::optional<FoldOp> builtin = fold_op(op.op)) {
    fold.op = *builtin;
  } else if (const std::optional<PreMulSum> made = context.reductions.find(op.op)) {
    if (made->dtype != op.dtype)
      return refuse(ncclInvalidArgument, "reduction " + std::to_string(op.op) + " was made for data type " +
                                             std::to_string(made->dtype) + ", not " + std::to_string(op.dtype));
    fold.op = FoldOp::kPreMulSum;
    fold.scalar.device = made->device;
    fold.scalar.bits = made->bits;
  } else {
    return refuse(ncclInvalidArgument, "reduction " + std::to_string(op.op) + " is not one of this communicator's");
  }
  Route r = of_kind(Route::kComposed);
  r.fold = fold;
  return r;
}

// Whether the input and the output may share bytes in place: the layouts NCCL defines for in-place calls (the same
// buffer for all-reduce; this rank's block of the output as the input of all-gather, of the input as the output of
// reduce-scatter), else none (all-to-all in place would overwrite blocks a peer has still to read).
bool overlap_allowed(int32_t collective, const char* in, size_t in_bytes, const char* out, size_t out_bytes,
                     int rank) {
  if (in + in_bytes <= out || out + out_bytes <= in) return true;
  switch (collective) {
    case codes::kAllReduce: return in == out;
    case codes::kAllGather: return in == out + rank * in_bytes;
    case codes::kReduceScatter: return out == in + rank * out_bytes;
    default: return false;
  }
}

Route route_decoded(const RouteContext& context, const Operation& op, const DecodedOperation& d) {
  const int n = context.nranks;
  if (d.element == 0) {
    return context.nccl_can_run
               ? of_kind(Route::kForward)
               : refuse(ncclInvalidArgument, "data type " + std::to_string(op.dtype) + " is not NCCL's");
  }
  const bool nccl_keeps = context.nccl_can_run && !context.shares_gpu;
  if (is_point_to_point(op.function)) {
    if (op.peer < 0 || op.peer >= n)
      return refuse(ncclInvalidArgument, "peer " + std::to_string(op.peer) + " of " + std::to_string(n) + " ranks");
    if (n == 1) return of_kind(Route::kPointToPoint);
    if (select_algorithm(context.tuned, codes::kPermute, d.block_bytes, n, nccl_keeps, context.shares_gpu) < 0)
      return of_kind(Route::kForward);
    return of_kind(Route::kPointToPoint);
  }
  if (has_root(op.function) && (op.root < 0 || op.root >= n))
    return refuse(ncclInvalidArgument, "root " + std::to_string(op.root) + " of " + std::to_string(n) + " ranks");
  // One rank: a copy of its one block, ours whatever serves the communicator. Every builtin reduction of one block
  // is the block itself, so only a PreMulSum, which multiplies it, folds; the reduction is still checked.
  if (n == 1) {
    if (!reduces(op.function)) return of_kind(Route::kComposed);
    Route r = composed_reduction(context, op);
    if (r.fold && r.fold->op != FoldOp::kPreMulSum) r.fold.reset();
    return r;
  }
  if (d.kernel_runs()) {
    // Per-rank input bytes, as the table counts them.
    const uint64_t nbytes = d.block_bytes * input_blocks(d.collective, static_cast<size_t>(n));
    const int32_t algorithm = select_algorithm(context.tuned, d.collective, nbytes, n, nccl_keeps, context.shares_gpu);
    if (algorithm < 0) return of_kind(Route::kForward);
    if (collective_supported(d.collective, algorithm, d.dtype, d.op)) {
      Route r = of_kind(Route::kCollective);
      r.algorithm = algorithm;
      return r;
    }
  }
  // What no collective kernel of ours runs: NVIDIA's where it serves the communicator, else composed.
  if (context.nccl_can_run) return of_kind(Route::kForward);
  if (reduces(op.function)) return composed_reduction(context, op);
  if (has_root(op.function)) return of_kind(Route::kComposed);
  return refuse(ncclInvalidUsage,
                "is not run by jax_mscclpp's runtime, and NVIDIA's NCCL cannot run on this communicator");
}

}  // namespace

Route route(const RouteContext& context, const Operation& op) {
  const DecodedOperation decoded = decode_operation(op);
  Route r = route_decoded(context, op, decoded);
  r.decoded = decoded;
  return r;
}

cuda::Call collective_call(const Route& route, const Operation& op, const CallPlace& place) {
  const DecodedOperation& d = route.decoded;
  if (in_place_supported(d.collective, d.dtype, d.op)) {
    const size_t n = static_cast<size_t>(place.nranks);
    const size_t in_bytes = d.block_bytes * input_blocks(d.collective, n);
    const size_t out_bytes = d.block_bytes * output_blocks(d.collective, n);
    cuda::InPlaceCall call{d.collective, {}, d.block_count, d.dtype, d.op, place.max_blocks};
    if (overlap_allowed(d.collective, static_cast<const char*>(op.send), in_bytes, static_cast<const char*>(op.recv),
                        out_bytes, place.rank) &&
        place.windows.in_place(op.send, in_bytes, op.recv, out_bytes, place.nranks, &call.buffers))
      return call;
  }
  cuda::CollectiveCall call{d.collective, route.algorithm, op.send, op.recv, d.block_count, d.dtype, d.op,
                            place.max_blocks};
  // Registered buffers (every rank's, as NCCL requires) the peers may reach where they are.
  const size_t n = static_cast<size_t>(place.nranks);
  const size_t in_bytes = d.block_bytes * input_blocks(d.collective, n);
  const size_t out_bytes = d.block_bytes * output_blocks(d.collective, n);
  call.peers_reach_buffers =
      place.windows.registered(op.send, in_bytes, op.recv, out_bytes) &&
      overlap_allowed(d.collective, static_cast<const char*>(op.send), in_bytes, static_cast<const char*>(op.recv),
                      out_bytes, place.rank);
  return call;
}

P2PMessage point_to_point_message(const Route& route, const Operation& op) {
  if (op.function == ApiFunction::ncclSend)
    return {const_cast<char*>(static_cast<const char*>(op.send)), route.decoded.block_bytes, op.peer, 0};
  return {static_cast<char*>(op.recv), route.decoded.block_bytes, op.peer, 1};
}

std::vector<GroupLaunch> plan_group(const std::vector<std::pair<const void*, bool>>& queue) {
  std::vector<GroupLaunch> launches;
  std::vector<const void*> p2p_order;
  for (size_t i = 0; i < queue.size(); ++i) {
    const auto& [communicator, point_to_point] = queue[i];
    if (!point_to_point) {
      launches.push_back({false, {i}});
    } else if (std::find(p2p_order.begin(), p2p_order.end(), communicator) == p2p_order.end()) {
      p2p_order.push_back(communicator);
    }
  }
  for (const void* communicator : p2p_order) {
    GroupLaunch launch{true, {}};
    for (size_t i = 0; i < queue.size(); ++i)
      if (queue[i].first == communicator && queue[i].second) launch.operations.push_back(i);
    launches.push_back(std::move(launch));
  }
  return launches;
}

}  // namespace jax_mscclpp::nccl
