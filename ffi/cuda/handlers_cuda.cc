// XLA FFI handlers of platform CUDA: decode XLA's buffers and attributes, find this device's rank of the
// communicator (by the device ordinal XLA runs the call on), and launch the collective on XLA's stream.
//
// Operands and attributes are those of the CPU handlers (ffi/handlers_cpu.cc); the partition operand is not
// needed here: a process holds at most one rank per device and communicator. Everything a launch depends on
// is fixed per (communicator, shapes), and the epoch lives in device memory, so the handlers are
// command-buffer compatible: XLA may record a call once and replay it.
#include <string>

#include "collective_types.h"
#include "collectives/collective.h"
#include "communicator.h"
#include "handlers.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_mscclpp {
namespace {

// The element type codes of ffi/collective_types.h (DType), which equal those of jax_mscclpp/reduce.cuh.
int32_t dtype_code(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return int32_t(DType::kF32);
    case ffi::DataType::BF16: return int32_t(DType::kBF16);
    case ffi::DataType::F16: return int32_t(DType::kF16);
    case ffi::DataType::F64: return int32_t(DType::kF64);
    case ffi::DataType::S8: return int32_t(DType::kS8);
    case ffi::DataType::U8: return int32_t(DType::kU8);
    case ffi::DataType::S16: return int32_t(DType::kS16);
    case ffi::DataType::U16: return int32_t(DType::kU16);
    case ffi::DataType::S32: return int32_t(DType::kS32);
    case ffi::DataType::U32: return int32_t(DType::kU32);
    case ffi::DataType::S64: return int32_t(DType::kS64);
    case ffi::DataType::U64: return int32_t(DType::kU64);
    default: return -1;
  }
}

template <Collective kCollective>
ffi::Error collective_cuda(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::AnyBuffer partition,
                           ffi::Result<ffi::AnyBuffer> y, int64_t comm_id, int32_t op, int32_t algorithm,
                           int64_t plan_id) {
  (void)partition;
  (void)plan_id;
  auto comm = cuda::find_gpu_communicator(comm_id);
  cuda::GpuRank* rank = comm ? comm->rank(device) : nullptr;
  if (!rank || !rank->ready())
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_mscclpp: communicator " + std::to_string(comm_id) + " has no rank on device " +
                          std::to_string(device));
  const int32_t dtype = dtype_code(x.element_type());
  if (dtype < 0 || y->element_type() != x.element_type())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: unsupported or mismatched element type");
  const CollectiveContext& ctx = rank->context();
  const size_t n = x.element_count(), world = size_t(ctx.nranks);
  size_t block = n, expected_out = n;
  switch (kCollective) {
    case Collective::kAllReduce: break;
    case Collective::kAllGather: expected_out = n * world; break;
    case Collective::kReduceScatter: block = expected_out = n / world; break;
    case Collective::kAllToAll: block = n / world; break;
  }
  if (n % (block ? block : 1) || y->element_count() != expected_out)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      std::string("jax_mscclpp: ") + collective_name(kCollective) + " got mismatched shapes");
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
      {"jax_mscclpp_all_reduce", reinterpret_cast<void*>(AllReduceCuda)},
      {"jax_mscclpp_all_gather", reinterpret_cast<void*>(AllGatherCuda)},
      {"jax_mscclpp_reduce_scatter", reinterpret_cast<void*>(ReduceScatterCuda)},
      {"jax_mscclpp_all_to_all", reinterpret_cast<void*>(AllToAllCuda)},
  };
  return handlers;
}

}  // namespace jax_mscclpp
