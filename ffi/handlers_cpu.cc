// XLA FFI handlers of platform "cpu": decode XLA's buffers and attributes, find the communicator, run the host
// backend on the calling device's thread, and turn any failure into an ffi::Error.
//
// Operands: x (the local block(s)), partition (u32 scalar: XLA's partition id of this device, which the
// communicator maps to its group and rank). Attributes: comm_id, op, algorithm (collective_types.h values),
// plan_id (the registered execution plan when algorithm is kPlan, else -1).
#include <sstream>

#include "collective_types.h"
#include "handlers.h"
#include "host_collectives.h"
#include "host_plan.h"
#include "registry.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_mscclpp {
namespace {

DType to_dtype(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return DType::kF32;
    case ffi::DataType::BF16: return DType::kBF16;
    case ffi::DataType::F16: return DType::kF16;
    case ffi::DataType::F64: return DType::kF64;
    case ffi::DataType::S8: return DType::kS8;
    case ffi::DataType::U8: return DType::kU8;
    case ffi::DataType::S16: return DType::kS16;
    case ffi::DataType::U16: return DType::kU16;
    case ffi::DataType::S32: return DType::kS32;
    case ffi::DataType::U32: return DType::kU32;
    case ffi::DataType::S64: return DType::kS64;
    case ffi::DataType::U64: return DType::kU64;
    default: return DType::kInvalid;
  }
}

// Elements of one block (collective_types.h) from the input's element count, or 0 on a shape mismatch.
bool block_count_of(Collective c, size_t in_elems, size_t out_elems, int world, size_t* block) {
  switch (c) {
    case Collective::kAllReduce: *block = in_elems; return out_elems == in_elems;
    case Collective::kAllGather: *block = in_elems; return out_elems == in_elems * world;
    case Collective::kReduceScatter: *block = in_elems / world; return in_elems % world == 0 && out_elems == *block;
    case Collective::kAllToAll: *block = in_elems / world; return in_elems % world == 0 && out_elems == in_elems;
  }
  return false;
}

template <Collective kCollective>
ffi::Error collective_cpu(ffi::AnyBuffer x, ffi::AnyBuffer partition, ffi::Result<ffi::AnyBuffer> y,
                          int64_t comm_id, int32_t op, int32_t algorithm, int64_t plan_id) {
  auto comm = find_host_communicator(comm_id);
  if (!comm)
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_mscclpp: communicator " + std::to_string(comm_id) + " does not exist (destroyed?)");
  const DType dtype = to_dtype(x.element_type());
  if (dtype == DType::kInvalid || y->element_type() != x.element_type())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: unsupported or mismatched element type");
  if (partition.element_type() != ffi::DataType::U32 || partition.element_count() != 1)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: partition operand must be a u32 scalar");
  size_t block = 0;
  if (!block_count_of(kCollective, x.element_count(), y->element_count(), comm->world_size(), &block)) {
    std::ostringstream msg;
    msg << "jax_mscclpp: " << collective_name(kCollective) << " got " << x.element_count() << " input and "
        << y->element_count() << " output elements for world size " << comm->world_size();
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, msg.str());
  }
  const int pid = int(*static_cast<const uint32_t*>(partition.untyped_data()));
  CollectiveCall call{kCollective, ReduceOp(op), Algorithm(algorithm), dtype, x.untyped_data(), y->untyped_data(),
                      block};
  std::string err;
  if (call.algorithm == Algorithm::kPlan) {
    auto plan = comm->find_plan(plan_id);
    if (!plan)
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                        "jax_mscclpp: plan " + std::to_string(plan_id) + " is not registered with communicator " +
                            std::to_string(comm_id));
    err = host::run_plan(*comm, *plan, pid, call, timeout_seconds());
  } else {
    err = host::run_collective(*comm, pid, call, timeout_seconds());
  }
  if (!err.empty()) return ffi::Error(ffi::ErrorCode::kDeadlineExceeded, err);
  return ffi::Error::Success();
}

#define JAX_MSCCLPP_CPU_HANDLER(symbol, collective)                     \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(symbol, collective_cpu<collective>,     \
                                ffi::Ffi::Bind()                        \
                                    .Arg<ffi::AnyBuffer>()              \
                                    .Arg<ffi::AnyBuffer>()              \
                                    .Ret<ffi::AnyBuffer>()              \
                                    .Attr<int64_t>("comm_id")           \
                                    .Attr<int32_t>("op")                \
                                    .Attr<int32_t>("algorithm")         \
                                    .Attr<int64_t>("plan_id"));

JAX_MSCCLPP_CPU_HANDLER(AllReduceCpu, Collective::kAllReduce)
JAX_MSCCLPP_CPU_HANDLER(AllGatherCpu, Collective::kAllGather)
JAX_MSCCLPP_CPU_HANDLER(ReduceScatterCpu, Collective::kReduceScatter)
JAX_MSCCLPP_CPU_HANDLER(AllToAllCpu, Collective::kAllToAll)

}  // namespace

const HandlerList& cpu_handlers() {
  static const HandlerList handlers = {
      {"jax_mscclpp_all_reduce", reinterpret_cast<void*>(AllReduceCpu)},
      {"jax_mscclpp_all_gather", reinterpret_cast<void*>(AllGatherCpu)},
      {"jax_mscclpp_reduce_scatter", reinterpret_cast<void*>(ReduceScatterCpu)},
      {"jax_mscclpp_all_to_all", reinterpret_cast<void*>(AllToAllCpu)},
  };
  return handlers;
}

}  // namespace jax_mscclpp
