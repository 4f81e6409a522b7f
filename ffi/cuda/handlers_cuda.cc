// XLA FFI handlers of platform CUDA: decode XLA's buffers and attributes into a call (runtime/gpu/call.h), find
// this device's rank of the communicator (by the device ordinal XLA runs the call on), and run the call on XLA's
// stream through the rank's one call entry (GpuRank::run: refusal, launch, poisoning).
//
// Attributes are those of the CPU handlers (ffi/handlers_cpu.cc); there is no partition operand here: a process
// holds at most one rank per device and communicator, found by the device ordinal. Algorithm kPlan runs the execution
// plan bound to the rank as `plan_id` (GpuRank::bind_plan, at lowering) on the plan executor. Everything a
// launch depends on is fixed per (communicator, plan, shapes), and the epoch lives in device memory, so a call may
// be recorded once and replayed; each handler is registered with and without XLA's command-buffer trait
// (call_decoding.h, kOutsideGraphsSuffix) and the lowering picks one per call.
#include <string>

#include "call.h"
#include "call_decoding.h"
#include "collective_types.h"
#include "collectives/collective.h"
#include "collectives/epilogue.h"
#include "communicator.h"
#include "handlers.h"
#include "host_failure_status.h"
#include "side_stream.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_mscclpp {
namespace {

// The rank of communicator `comm_id` on `device`, or null.
cuda::GpuRank* find_rank(int64_t comm_id, int32_t device) {
  auto comm = cuda::find_gpu_communicator(comm_id);
  cuda::GpuRank* rank = comm ? comm->rank(device) : nullptr;
  return rank && rank->ready() ? rank : nullptr;
}

ffi::Error no_rank(int64_t comm_id, int32_t device) {
  return ffi::Error(ffi::ErrorCode::kFailedPrecondition, "jax_mscclpp: communicator " + std::to_string(comm_id) +
                                                             " has no rank on device " + std::to_string(device));
}

// XLA's status for what GpuRank::run returned (runtime/gpu/call.h). A refused call (an earlier kernel of the rank
// failed and stopped; its record: docs/reliability.md, "On GPUs") is coded as the host backend codes it (failure_code): ABORTED
// for ranks out of step (mismatched calls, or a peer that failed the communicator), DEADLINE_EXCEEDED for a wait
// that timed out, with the recovery advice; an unbound plan is FAILED_PRECONDITION, a plan whose blocks do not fit
// the call INVALID_ARGUMENT, a failed launch INTERNAL.
ffi::Error status_of(const cuda::CallResult& result, int64_t comm_id, int32_t device) {
  using cuda::CallStatus;
  switch (result.status) {
    case CallStatus::kLaunched:
      return ffi::Error::Success();
    case CallStatus::kRefused:
      // The communicator stays unusable: a refused rank refuses every later call.
      return ffi::Error(failure_code(result.failure, /*broken=*/true),
                        "jax_mscclpp: communicator " + std::to_string(comm_id) + " " + result.message +
                            kRecoveryAdvice);
    default:
      break;
  }
  const ffi::ErrorCode code = result.status == CallStatus::kPlanNotBound   ? ffi::ErrorCode::kFailedPrecondition
                              : result.status == CallStatus::kPlanMismatch ? ffi::ErrorCode::kInvalidArgument
                                                                           : ffi::ErrorCode::kInternal;
  return ffi::Error(code, "jax_mscclpp: communicator " + std::to_string(comm_id) + " on device " +
                              std::to_string(device) + ": " + result.message);
}

template <Collective kCollective>
ffi::Error collective_cuda(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                           int64_t comm_id, int32_t op, int32_t algorithm, int64_t plan_id, int32_t max_blocks) {
  cuda::GpuRank* rank = find_rank(comm_id, device);
  if (!rank) return no_rank(comm_id, device);
  if (cuda::CallResult refused = rank->refusal(); !refused.launched()) return status_of(refused, comm_id, device);
  // The kernels take the DType codes (jax_mscclpp/codes.def).
  const DType dtype = to_dtype(x.element_type());
  if (dtype == DType::kInvalid || y->element_type() != x.element_type())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: unsupported or mismatched element type");
  size_t block = 0;
  if (!block_count_of(int32_t(kCollective), x.element_count(), y->element_count(), size_t(rank->context().nranks),
                      &block))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      std::string("jax_mscclpp: ") + collective_name(kCollective) + " got mismatched shapes");
  // XLA's buffers: the ranks of this process may reach them in place (CollectiveCall::peers_reach_buffers).
  const cuda::CollectiveCall call{int32_t(kCollective), algorithm, x.untyped_data(), y->untyped_data(), block,
                                  int32_t(dtype), op, max_blocks, plan_id, true};
  return status_of(rank->run(call, stream), comm_id, device);
}

// The permutation (codes.def, kPermute): the attributes of the others and its destination table
// (jax_mscclpp/permute.py), from which this rank takes its peers.
ffi::Error permute_cuda(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                        int64_t comm_id, int32_t op, int32_t algorithm, int64_t plan_id, int32_t max_blocks,
                        ffi::Span<const int32_t> destinations) {
  cuda::GpuRank* rank = find_rank(comm_id, device);
  if (!rank) return no_rank(comm_id, device);
  if (cuda::CallResult refused = rank->refusal(); !refused.launched()) return status_of(refused, comm_id, device);
  const DType dtype = to_dtype(x.element_type());
  if (dtype == DType::kInvalid || y->element_type() != x.element_type() || y->element_count() != x.element_count())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: permute got mismatched or unsupported buffers");
  const CollectiveContext& ctx = rank->context();
  int32_t send_to = -1, recv_from = -1;
  if (!permute_peers(destinations, ctx.nranks, ctx.rank, &send_to, &recv_from))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "jax_mscclpp: permute got a destination table that is not a partial permutation of " +
                          std::to_string(ctx.nranks) + " ranks");
  if (algorithm == int32_t(Algorithm::kPlan)) {  // a registered plan of this permutation (jax_mscclpp/plans.py)
    const cuda::CollectiveCall call{int32_t(Collective::kPermute), algorithm, x.untyped_data(), y->untyped_data(),
                                    x.element_count(), int32_t(dtype), op, max_blocks, plan_id, true, recv_from < 0};
    return status_of(rank->run(call, stream), comm_id, device);
  }
  const cuda::PermuteCall call{algorithm, x.untyped_data(), y->untyped_data(), x.element_count(), int32_t(dtype),
                               send_to, recv_from, max_blocks};
  return status_of(rank->run(call, stream), comm_id, device);
}

// Every handler's context: the stream XLA runs it on, and its device.
auto cuda_binding() { return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::DeviceOrdinal>(); }

// What every collective's handler takes (call_decoding.h); the permutation adds its destination table.
auto common_cuda_binding() {
  return cuda_binding()
      .Arg<ffi::AnyBuffer>()
      .Ret<ffi::AnyBuffer>()
      .Attr<int64_t>("comm_id")
      .Attr<int32_t>("op")
      .Attr<int32_t>("algorithm")
      .Attr<int64_t>("plan_id")
      .Attr<int32_t>("max_blocks");
}

// One handler per collective row of codes.def, named after its enumerator, twice (call_decoding.h,
// kOutsideGraphsSuffix): kAllReduceCuda may be recorded into command buffers, kAllReduceCudaOutsideGraphs may not.
#define JAX_MSCCLPP_CUDA_IMPLEMENTATION(enumerator) \
  (implementation_of<Collective::enumerator, permute_cuda, collective_cuda<Collective::enumerator>>())
#define JAX_MSCCLPP_COLLECTIVE(enumerator, ...)                                                                \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(enumerator##Cuda, JAX_MSCCLPP_CUDA_IMPLEMENTATION(enumerator),                  \
                                binding_of<Collective::enumerator>(common_cuda_binding),                       \
                                {ffi::Traits::kCmdBufferCompatible});                                          \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(enumerator##CudaOutsideGraphs, JAX_MSCCLPP_CUDA_IMPLEMENTATION(enumerator),     \
                                binding_of<Collective::enumerator>(common_cuda_binding));
#include "jax_mscclpp/codes.def"
#undef JAX_MSCCLPP_CUDA_IMPLEMENTATION

// A collective started on this device's side stream, and the done that joins it (side_stream.h;
// docs/architecture.md, "Overlap"). The done takes the start's operand too, so that XLA keeps it alive until the
// kernel reading it is joined, and returns the start's result in place (an output aliased to that operand).
// A done may join several starts: each is a thunk outside XLA's command buffers, so fewer is faster.
template <Collective kCollective>
ffi::Error start_cuda(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                      int64_t comm_id, int32_t op, int32_t algorithm, int64_t plan_id, int32_t max_blocks,
                      int64_t call_id) {
  cudaStream_t side = nullptr;
  cudaError_t err = cuda::fork_to_side_stream(device, stream, &side);
  if (err != cudaSuccess)
    return ffi::Error(ffi::ErrorCode::kInternal,
                      std::string("jax_mscclpp: forking to the side stream failed: ") + cudaGetErrorString(err));
  ffi::Error launched = collective_cuda<kCollective>(side, device, x, y, comm_id, op, algorithm, plan_id, max_blocks);
  // Recorded whatever the launch did, so that the done always has an event to wait on.
  err = cuda::record_done(device, call_id, side);
  if (launched.failure()) return launched;
  if (err != cudaSuccess)
    return ffi::Error(ffi::ErrorCode::kInternal,
                      std::string("jax_mscclpp: recording a started call's event failed: ") + cudaGetErrorString(err));
  return ffi::Error::Success();
}

// Joins started calls: args are the starts' operands, then their results; rets are those results, each aliased
// to its argument (the lowering's operand_output_aliases). One done may join several starts of this device.
ffi::Error done_cuda(cudaStream_t stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets,
                     ffi::Span<const int64_t> call_ids) {
  const size_t n = call_ids.size();
  if (args.size() != 2 * n || rets.size() != n)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "jax_mscclpp: a done takes each started call's operand and result, and returns the results");
  for (size_t i = 0; i < n; ++i) {
    auto started = args.get<ffi::AnyBuffer>(n + i);
    auto y = rets.get<ffi::AnyBuffer>(i);
    if (!started.has_value() || !y.has_value())
      return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: a done's operands are not buffers");
    if ((*y)->untyped_data() != started->untyped_data())
      return ffi::Error(ffi::ErrorCode::kInternal,
                        "jax_mscclpp: the result of a started collective was copied before its done (XLA did not "
                        "alias the done's output with it); its value would be read before it is complete");
  }
  for (const int64_t call_id : call_ids) {
    const cudaError_t err = cuda::join_done(device, call_id, stream);
    if (err != cudaSuccess)
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                        "jax_mscclpp: joining started call " + std::to_string(call_id) + " on device " +
                            std::to_string(device) + " failed: " + cudaGetErrorString(err) +
                            " (a done without its start on this device)");
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(AllReduceStartCuda, start_cuda<Collective::kAllReduce>,
                              common_cuda_binding().Attr<int64_t>("call_id"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(DoneCuda, done_cuda,
                              cuda_binding().RemainingArgs().RemainingRets().Attr<ffi::Span<const int64_t>>("call_ids"));

// all_reduce (sum) with a fused epilogue (collectives/epilogue.h): (x, residual[, weight]) -> (new_residual[,
// normed]). The row length is the weight's length (RMSNorm) or the attribute `row` (residual only).
ffi::Error epilogue_cuda(Epilogue kind, cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::AnyBuffer residual,
                         const void* weight, uint64_t row, ffi::AnyBuffer new_residual, void* normed, int64_t comm_id,
                         float eps) {
  cuda::GpuRank* rank = find_rank(comm_id, device);
  if (!rank) return no_rank(comm_id, device);
  if (cuda::CallResult refused = rank->refusal(); !refused.launched()) return status_of(refused, comm_id, device);
  const DType dtype = to_dtype(x.element_type());
  if (residual.element_type() != x.element_type() || new_residual.element_type() != x.element_type() ||
      residual.element_count() != x.element_count() || new_residual.element_count() != x.element_count())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: fused all_reduce: mismatched operands");
  const cuda::FusedAllReduceCall call{
      kind,
      EpilogueCall{x.untyped_data(), residual.untyped_data(), weight, new_residual.untyped_data(), normed,
                   x.element_count(), row, eps},
      int32_t(dtype)};
  return status_of(rank->run(call, stream), comm_id, device);
}

ffi::Error all_reduce_residual_cuda(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::AnyBuffer residual,
                                    ffi::Result<ffi::AnyBuffer> new_residual, int64_t comm_id, int64_t row) {
  return epilogue_cuda(Epilogue::kResidual, stream, device, x, residual, nullptr, uint64_t(row), *new_residual, nullptr,
                       comm_id, 0.f);
}

ffi::Error all_reduce_rmsnorm_cuda(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::AnyBuffer residual,
                                   ffi::AnyBuffer weight, ffi::Result<ffi::AnyBuffer> normed,
                                   ffi::Result<ffi::AnyBuffer> new_residual, int64_t comm_id, float eps) {
  if (weight.element_type() != x.element_type() || normed->element_type() != x.element_type())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: fused all_reduce: mismatched operands");
  return epilogue_cuda(Epilogue::kResidualRMSNorm, stream, device, x, residual, weight.untyped_data(),
                       weight.element_count(), *new_residual, normed->untyped_data(), comm_id, eps);
}

// (x, residual) -> new_residual; (x, residual, weight) -> (new_residual, normed).
auto residual_binding() {
  return cuda_binding().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Attr<int64_t>("comm_id")
      .Attr<int64_t>("row");
}

auto rmsnorm_binding() {
  return cuda_binding().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()
      .Ret<ffi::AnyBuffer>().Attr<int64_t>("comm_id").Attr<float>("eps");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(AllReduceResidualCuda, all_reduce_residual_cuda, residual_binding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(AllReduceResidualCudaOutsideGraphs, all_reduce_residual_cuda,
                              residual_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(AllReduceRMSNormCuda, all_reduce_rmsnorm_cuda, rmsnorm_binding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(AllReduceRMSNormCudaOutsideGraphs, all_reduce_rmsnorm_cuda,
                              rmsnorm_binding());

// A ragged all-to-all (collectives/collective.h, RaggedAllToAll): (operand, output_in, input_offsets, send_sizes,
// output_offsets, recv_sizes) -> out, `out` aliased to `output_in` at lowering (jax_mscclpp/ragged.py), so that
// the rows no peer writes keep output_in's values; where XLA gives two buffers anyway, output_in is copied into
// out on the stream first (capture-safe). operand and output hold rows of one dtype (whole bytes) and one trailing
// shape; the four tables are integers of one width (int32 or int64), nranks entries each. The device reads every
// size and offset, and checks them (a failed call, the rank's error record naming the peer).
ffi::Error ragged_all_to_all_cuda(cudaStream_t stream, int32_t device, ffi::AnyBuffer operand,
                                  ffi::AnyBuffer output_in, ffi::AnyBuffer input_offsets, ffi::AnyBuffer send_sizes,
                                  ffi::AnyBuffer output_offsets, ffi::AnyBuffer recv_sizes,
                                  ffi::Result<ffi::AnyBuffer> out, int64_t comm_id) {
  cuda::GpuRank* rank = find_rank(comm_id, device);
  if (!rank) return no_rank(comm_id, device);
  if (cuda::CallResult refused = rank->refusal(); !refused.launched()) return status_of(refused, comm_id, device);
  auto invalid = [](const std::string& what) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: ragged_all_to_all: " + what);
  };
  const ffi::DataType type = operand.element_type();
  switch (type) {
    case ffi::DataType::INVALID:
    case ffi::DataType::TOKEN:
    case ffi::DataType::S1:
    case ffi::DataType::S2:
    case ffi::DataType::S4:
    case ffi::DataType::U1:
    case ffi::DataType::U2:
    case ffi::DataType::U4:
    case ffi::DataType::F4E2M1FN:
      return invalid("the kernel moves rows of whole-byte elements");
    default:
      break;
  }
  if (output_in.element_type() != type || out->element_type() != type)
    return invalid("operand and output differ in dtype");
  const auto in_dims = operand.dimensions(), out_dims = output_in.dimensions(), result_dims = out->dimensions();
  bool same_rows = in_dims.size() >= 1 && out_dims.size() == in_dims.size() && result_dims.size() == in_dims.size();
  uint64_t row_elements = 1;
  for (size_t d = 0; same_rows && d < in_dims.size(); ++d) {
    same_rows = result_dims[d] == out_dims[d] && (d == 0 || in_dims[d] == out_dims[d]);
    if (d > 0) row_elements *= uint64_t(in_dims[d]);
  }
  if (!same_rows) return invalid("operand, output and result must be rows of one shape (every axis but the first)");
  const ffi::DataType index_type = input_offsets.element_type();
  if (index_type != ffi::DataType::S32 && index_type != ffi::DataType::S64)
    return invalid("the offsets and sizes must be int32 or int64");
  const size_t nranks = size_t(rank->context().nranks);
  for (const ffi::AnyBuffer* table : {&input_offsets, &send_sizes, &output_offsets, &recv_sizes}) {
    if (table->element_type() != index_type) return invalid("the offsets and sizes must be integers of one width");
    if (table->element_count() != nranks)
      return invalid("the offsets and sizes must have one entry per rank (" + std::to_string(nranks) + ")");
  }
  if (out->untyped_data() != output_in.untyped_data() && out->size_bytes() > 0) {
    const cudaError_t err = cudaMemcpyAsync(out->untyped_data(), output_in.untyped_data(), out->size_bytes(),
                                            cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess)
      return ffi::Error(ffi::ErrorCode::kInternal, std::string("jax_mscclpp: ragged_all_to_all: copying the output "
                                                               "into the result failed: ") +
                                                       cudaGetErrorString(err));
  }
  const uint64_t row_bytes = uint64_t(ffi::ByteWidth(type)) * row_elements;
  if (row_bytes == 0) return ffi::Error::Success();  // rows of no elements: nothing moves, on every rank alike
  const cuda::RaggedAllToAllCall call{RaggedAllToAll{
      operand.untyped_data(), uint64_t(in_dims[0]), out->untyped_data(), uint64_t(out_dims[0]), row_bytes,
      input_offsets.untyped_data(), send_sizes.untyped_data(), output_offsets.untyped_data(),
      recv_sizes.untyped_data(), int32_t(ffi::ByteWidth(index_type))}};
  return status_of(rank->run(call, stream), comm_id, device);
}

auto ragged_binding() {
  return cuda_binding().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
      .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Attr<int64_t>("comm_id");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(RaggedAllToAllCuda, ragged_all_to_all_cuda, ragged_binding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(RaggedAllToAllCudaOutsideGraphs, ragged_all_to_all_cuda, ragged_binding());

}  // namespace

const HandlerList& cuda_handlers() {
  static const HandlerList handlers = [] {
    const std::string outside = kOutsideGraphsSuffix;
    const std::string residual = kAllReduceResidualTarget, rmsnorm = kAllReduceRMSNormTarget,
                      ragged = kRaggedAllToAllTarget;
    return HandlerList{
#define JAX_MSCCLPP_COLLECTIVE(enumerator, ...)                                            \
  {target_name(Collective::enumerator), reinterpret_cast<void*>(enumerator##Cuda)},          \
      {target_name(Collective::enumerator) + outside, reinterpret_cast<void*>(enumerator##CudaOutsideGraphs)},
#include "jax_mscclpp/codes.def"
        {residual, reinterpret_cast<void*>(AllReduceResidualCuda)},
        {residual + outside, reinterpret_cast<void*>(AllReduceResidualCudaOutsideGraphs)},
        {rmsnorm, reinterpret_cast<void*>(AllReduceRMSNormCuda)},
        {rmsnorm + outside, reinterpret_cast<void*>(AllReduceRMSNormCudaOutsideGraphs)},
        {ragged, reinterpret_cast<void*>(RaggedAllToAllCuda)},
        {ragged + outside, reinterpret_cast<void*>(RaggedAllToAllCudaOutsideGraphs)},
        {target_name(Collective::kAllReduce) + kStartSuffix, reinterpret_cast<void*>(AllReduceStartCuda)},
        {kDoneTarget, reinterpret_cast<void*>(DoneCuda)},
    };
  }();
  return handlers;
}

}  // namespace jax_mscclpp
