// our_runtime.h's operations: each launched as its route says (routing.h), the calling thread's group queue
// (launched at the outermost ncclGroupEnd, as plan_group orders it), the reductions made on our communicators, and
// the call counts.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <exception>
#include <string>
#include <variant>
#include <vector>

#include "compositions.h"
#include "dtype_codes.h"
#include "group_depth.h"
#include "jax_mscclpp/codes.h"
#include "last_error.h"
#include "our_runtime.h"
#include "runtime_communicator.h"
#include "routing.h"

namespace jax_mscclpp::nccl {
namespace {

// Calls counted per function and column: an algorithm code (codes.def), a point-to-point group, a composition, or
// forwarded to the real NCCL. Row ncclGroupEnd, column p2p_group counts the launches of point-to-point groups (one
// per communicator and group, whatever its messages: launch_point_to_point).
constexpr int kPointToPointColumn = 30;
constexpr int kComposedColumn = 31;
constexpr int kNcclColumn = 32;
constexpr int kColumns = kNcclColumn + 1;
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, ...) \
  static_assert(code < kPointToPointColumn, "an algorithm code collides with a count column");
#include "jax_mscclpp/codes.def"
std::array<std::array<std::atomic<uint64_t>, kColumns>, static_cast<int>(ApiFunction::kCount)> counts{};

void count(ApiFunction function, int column) {
  if (column >= 0 && column < kColumns) counts[static_cast<int>(function)][column].fetch_add(1, std::memory_order_relaxed);
}

const char* column_name(int column) {
  switch (column) {
    case kPointToPointColumn: return "p2p_group";
    case kComposedColumn: return "composed";
    case kNcclColumn: return "nccl";
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name, ...) \
  case code:                                               \
    return name;
#include "jax_mscclpp/codes.def"
    default: return "?";
  }
}

// NCCL's result for what the rank's call entry returned (runtime/gpu/call.h): a refused call (an earlier kernel
// failed and stopped) is ncclRemoteError, arguments our kernels refuse ncclInvalidArgument, any other failed
// launch ncclUnhandledCudaError; the message names the function and the rank.
ncclResult_t launched(const cuda::CallResult& result, const Operation& op, const RuntimeCommunicator& runtime) {
  if (result.launched()) return ncclSuccess;
  const std::string where = std::string(api_function_name(op.function)) + " on rank " + std::to_string(runtime.rank());
  if (result.status == cuda::CallStatus::kRefused)
    return fail(ncclRemoteError, where + ": the communicator " + result.message);
  return fail(result.error == cudaErrorInvalidValue ? ncclInvalidArgument : ncclUnhandledCudaError,
              where + ": " + result.message);
}

// Every operation of a group but the point-to-point ones, which end_group gathers per communicator.
ncclResult_t execute(RuntimeCommunicator& runtime, const Operation& op, const Route& r) {
  switch (r.kind) {
    case Route::kCollective: {
      // In place over windows, or on registered buffers (the call entry decides), where they serve.
      const cuda::Call call = collective_call(r, op, runtime.call_place());
      const cuda::CallResult result = runtime.run(call, op.stream);
      const bool in_place = std::holds_alternative<cuda::InPlaceCall>(call) || result.in_place;
      count(op.function, in_place ? codes::kInPlace : r.algorithm);
      return launched(result, op, runtime);
    }
    case Route::kComposed:
      count(op.function, kComposedColumn);
      return launched(launch_composed(runtime, op, r), op, runtime);
    case Route::kPointToPoint: {
      count(op.function, kPointToPointColumn);
      const P2PMessage message = point_to_point_message(r, op);
      return launched(runtime.run(cuda::PointToPointCall{&message, 1}, op.stream), op, runtime);
    }
    default:
      return fail(ncclInternalError, std::string(api_function_name(op.function)) + ": nothing to launch");
  }
}

// An operation queued in the calling thread's group, with its route (decoded once, at submit).
struct Queued {
  RuntimeCommunicator* runtime;
  Operation operation;
  Route route;
};

// One communicator's point-to-point messages of a group, as one launch on the first one's stream; the other
// streams of the group join it before and wait for it after (events: capture-safe).
ncclResult_t launch_point_to_point(RuntimeCommunicator& runtime, const std::vector<const Queued*>& queued) {
  std::vector<P2PMessage> messages;
  std::vector<cudaStream_t> others;
  const Operation& first = queued.front()->operation;
  const cudaStream_t stream = first.stream;
  for (const Queued* q : queued) {
    const Operation* op = &q->operation;
    messages.push_back(point_to_point_message(q->route, *op));
    count(op->function, kPointToPointColumn);
    if (op->stream != stream && std::find(others.begin(), others.end(), op->stream) == others.end())
      others.push_back(op->stream);
  }
  const auto join = [](cudaStream_t from, cudaStream_t to) {
    cudaEvent_t event;
    cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e != cudaSuccess) return e;
    e = cudaEventRecord(event, from);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(to, event, 0);
    cudaEventDestroy(event);
    return e;
  };
  for (cudaStream_t other : others)
    if (const cudaError_t e = join(other, stream); e != cudaSuccess)
      return launched(cuda::launch_result(e, "a stream join"), first, runtime);
  count(ApiFunction::ncclGroupEnd, kPointToPointColumn);
  ncclResult_t result = launched(
      runtime.run(cuda::PointToPointCall{messages.data(), static_cast<int>(messages.size())}, stream), first, runtime);
  for (cudaStream_t other : others)
    if (const cudaError_t e = join(stream, other); e != cudaSuccess && result == ncclSuccess)
      result = launched(cuda::launch_result(e, "a stream join"), first, runtime);
  return result;
}

thread_local std::vector<Queued> group_queue;

ncclResult_t internal_failure(const char* what, const std::exception& error) {
  return fail(ncclInternalError, std::string(what) + ": " + error.what());
}

}  // namespace

bool submit(ncclComm_t comm, const Operation& operation, ncclResult_t* result) {
  OurCommunicator* ours = our_communicator(comm);
  if (ours == nullptr || ours->runtime == nullptr) return false;
  RuntimeCommunicator& runtime = *ours->runtime;
  try {
    report_late_wait(ours);  // a wait of an earlier operation past the timeout: its warning, once
    const RouteContext context{runtime.nranks(), ours->real != nullptr, runtime.shares_gpu(), runtime.tuned_rules(),
                               runtime.reductions()};
    Route r = route(context, operation);
    if (r.kind == Route::kForward) {
      count(operation.function, kNcclColumn);
      return false;
    }
    if (r.kind == Route::kRefuse) {
      *result = fail(r.refusal, std::string(api_function_name(operation.function)) + " on rank " +
                                    std::to_string(runtime.rank()) + ": " + r.reason);
      return true;
    }
    if (group_depth() > 0) {
      group_queue.push_back({&runtime, operation, std::move(r)});
      *result = ncclSuccess;
      return true;
    }
    *result = execute(runtime, operation, r);
    if (*result == ncclSuccess) clear_last_error();
  } catch (const std::exception& error) {
    *result = internal_failure(api_function_name(operation.function), error);
  }
  return true;
}

ncclResult_t end_group() {
  std::vector<Queued> queue;
  queue.swap(group_queue);
  ncclResult_t first_failure = ncclSuccess;
  const auto note = [&](ncclResult_t r) {
    if (first_failure == ncclSuccess) first_failure = r;
  };
  try {
    std::vector<std::pair<const void*, bool>> shape;
    for (const Queued& q : queue) shape.emplace_back(q.runtime, q.route.kind == Route::kPointToPoint);
    for (const GroupLaunch& launch : plan_group(shape)) {
      if (!launch.point_to_point) {
        const Queued& q = queue[launch.operations.front()];
        note(execute(*q.runtime, q.operation, q.route));
        continue;
      }
      std::vector<const Queued*> queued;
      for (size_t i : launch.operations) queued.push_back(&queue[i]);
      note(launch_point_to_point(*queue[launch.operations.front()].runtime, queued));
    }
  } catch (const std::exception& error) {
    note(internal_failure("ncclGroupEnd", error));
  }
  if (first_failure == ncclSuccess) clear_last_error();
  return first_failure;
}

void discard_group() { group_queue.clear(); }

// ncclGroupSimulateEnd's view of the queue (our_runtime.h, queued_group; group_estimate.cc).
std::vector<Operation> queued_group() {
  std::vector<Operation> operations;
  for (const Queued& q : group_queue) operations.push_back(q.operation);
  return operations;
}

ncclResult_t create_premulsum(OurCommunicator* ours, ncclRedOp_t* op, void* scalar, ncclDataType_t dtype,
                              ncclScalarResidence_t residence) {
  if (op == nullptr || scalar == nullptr)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op or scalar is NULL");
  const size_t element = nccl_dtype_bytes(dtype);
  if (element == 0) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: data type " + std::to_string(dtype));
  PreMulSum made{dtype, nullptr, 0};
  if (residence == ncclScalarDevice) {
    made.device = scalar;
  } else if (residence == ncclScalarHostImmediate) {
    std::memcpy(&made.bits, scalar, element);
  } else {
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: residence " + std::to_string(residence));
  }
  try {
    *op = ours->runtime->reductions().add(made);
  } catch (const std::exception& error) {
    return internal_failure("ncclRedOpCreatePreMulSum", error);
  }
  clear_last_error();
  return ncclSuccess;
}

ncclResult_t destroy_reduction(OurCommunicator* ours, ncclRedOp_t op) {
  if (!ours->runtime->reductions().remove(op))
    return fail(ncclInvalidArgument, "ncclRedOpDestroy: " + std::to_string(op) + " is not a reduction this "
                                     "communicator made");
  clear_last_error();
  return ncclSuccess;
}

std::string call_counts() {
  std::string text;
  for (int f = 0; f < static_cast<int>(ApiFunction::kCount); ++f) {
    for (int c = 0; c < kColumns; ++c) {
      const uint64_t n = counts[f][c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      text += std::string(api_function_name(static_cast<ApiFunction>(f))) + " " + column_name(c) + " " +
              std::to_string(n) + "\n";
    }
  }
  return text;
}

}  // namespace jax_mscclpp::nccl
