// XLA FFI handlers of platform CUDA: decode XLA's buffers and attributes, find this device's rank of the
// communicator (by the device ordinal XLA runs the call on), and launch the collective on XLA's stream.
//
// Operands and attributes are those of the CPU handlers (ffi/handlers_cpu.cc); the partition operand is not
// needed here: a process holds at most one rank per device and communicator. Algorithm kPlan runs the execution
// plan bound to the rank as `plan_id` (GpuRank::bind_plan, at lowering) on the plan executor. Everything a
// launch depends on is fixed per (communicator, plan, shapes), and the epoch lives in device memory, so the
// handlers are command-buffer compatible: XLA may record a call once and replay it.
#include <string>

#include "call_decoding.h"
#include "collective_types.h"
#include "collectives/collective.h"
#include "communicator.h"
#include "executor/executor.h"
#include "handlers.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_mscclpp {
namespace {

std::string where(int64_t plan_id, int64_t comm_id, int32_t device) {
  return "plan " + std::to_string(plan_id) + " of communicator " + std::to_string(comm_id) + " on device " +
         std::to_string(device);
}

// What launch_plan's refusals mean (kernels/executor/executor.h), for the error message.
const char* plan_launch_hint(cudaError_t err) {
  switch (err) {
    case cudaErrorInvalidValue:
      return " (an unsupported dtype or op, or a scratch too small for one element per chunk: raise the "
             "communicator's scratch_bytes)";
    case cudaErrorNotReady:
      return " (the plan needs port channels or a switch channel the communicator does not have)";
    default:
      return "";
  }
}

// One call of a bound plan. PLAN.md's geometry: block_count = input count / input blocks, and the output holds
// output blocks * block_count elements (what the host backend runs, since plans are verified to have the
// collective's block layout).
ffi::Error run_plan_cuda(const cuda::GpuRank& rank, const CollectiveContext& ctx, cudaStream_t stream,
                         int32_t device, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, int64_t comm_id,
                         int32_t dtype, int32_t op, int64_t plan_id) {
  const cuda::ExecutorPlan* plan = rank.plan(plan_id);
  if (!plan)
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_mscclpp: " + where(plan_id, comm_id, device) + " is not bound (Communicator.bind_plan)");
  const DevicePlan& dp = plan->device_plan();
  const size_t in_count = x.element_count(), out_count = y->element_count();
  const size_t block = in_count / size_t(dp.input_blocks);
  if (in_count % size_t(dp.input_blocks) != 0 || out_count != block * size_t(dp.output_blocks))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "jax_mscclpp: " + where(plan_id, comm_id, device) + " has " +
                          std::to_string(dp.input_blocks) + " input and " + std::to_string(dp.output_blocks) +
                          " output blocks; the call has " + std::to_string(in_count) + " input and " +
                          std::to_string(out_count) + " output elements");
  const cudaError_t err = launch_plan(ctx, dp, x.untyped_data(), y->untyped_data(), block, dtype, op, stream);
  if (err != cudaSuccess)
    return ffi::Error(ffi::ErrorCode::kInternal, "jax_mscclpp: launching " + where(plan_id, comm_id, device) +
                                                     " failed: " + cudaGetErrorString(err) +
                                                     plan_launch_hint(err));
  return ffi::Error::Success();
}

template <Collective kCollective>
ffi::Error collective_cuda(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::AnyBuffer partition,
                           ffi::Result<ffi::AnyBuffer> y, int64_t comm_id, int32_t op, int32_t algorithm,
                           int64_t plan_id) {
  (void)partition;
  auto comm = cuda::find_gpu_communicator(comm_id);
  cuda::GpuRank* rank = comm ? comm->rank(device) : nullptr;
  if (!rank || !rank->ready())
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_mscclpp: communicator " + std::to_string(comm_id) + " has no rank on device " +
                          std::to_string(device));
  // DType codes equal those of jax_mscclpp/reduce.cuh, which the kernels take.
  const int32_t dtype = int32_t(to_dtype(x.element_type()));
  if (to_dtype(x.element_type()) == DType::kInvalid || y->element_type() != x.element_type())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: unsupported or mismatched element type");
  const CollectiveContext& ctx = rank->context();
  size_t block = 0;
  if (!block_count_of(kCollective, x.element_count(), y->element_count(), size_t(ctx.nranks), &block))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      std::string("jax_mscclpp: ") + collective_name(kCollective) + " got mismatched shapes");
  if (Algorithm(algorithm) == Algorithm::kPlan)
    return run_plan_cuda(*rank, ctx, stream, device, x, y, comm_id, dtype, op, plan_id);
  const cudaError_t err = launch_collective(ctx, int32_t(kCollective), algorithm, x.untyped_data(),
                                            y->untyped_data(), block, dtype, op, stream);
  if (err != cudaSuccess)
    return ffi::Error(ffi::ErrorCode::kInternal, std::string("jax_mscclpp: launching ") +
                                                     collective_name(kCollective) + " failed: " +
                                                     cudaGetErrorString(err));
  return ffi::Error::Success();
}

#define JAX_MSCCLPP_CUDA_HANDLER(symbol, collective)                        \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(symbol, collective_cuda<collective>,        \
                                ffi::Ffi::Bind()                            \
                                    .Ctx<ffi::PlatformStream<cudaStream_t>>() \
                                    .Ctx<ffi::DeviceOrdinal>()              \
                                    .Arg<ffi::AnyBuffer>()                  \
                                    .Arg<ffi::AnyBuffer>()                  \
                                    .Ret<ffi::AnyBuffer>()                  \
                                    .Attr<int64_t>("comm_id")               \
                                    .Attr<int32_t>("op")                    \
                                    .Attr<int32_t>("algorithm")             \
                                    .Attr<int64_t>("plan_id"),              \
                                {ffi::Traits::kCmdBufferCompatible});

JAX_MSCCLPP_CUDA_HANDLER(AllReduceCuda, Collective::kAllReduce)
JAX_MSCCLPP_CUDA_HANDLER(AllGatherCuda, Collective::kAllGather)
JAX_MSCCLPP_CUDA_HANDLER(ReduceScatterCuda, Collective::kReduceScatter)
JAX_MSCCLPP_CUDA_HANDLER(AllToAllCuda, Collective::kAllToAll)

}  // namespace

const HandlerList& cuda_handlers() {
  static const HandlerList handlers = {
      {target_name(Collective::kAllReduce), reinterpret_cast<void*>(AllReduceCuda)},
      {target_name(Collective::kAllGather), reinterpret_cast<void*>(AllGatherCuda)},
      {target_name(Collective::kReduceScatter), reinterpret_cast<void*>(ReduceScatterCuda)},
      {target_name(Collective::kAllToAll), reinterpret_cast<void*>(AllToAllCuda)},
  };
  return handlers;
}

}  // namespace jax_mscclpp
