// XLA FFI handlers of platform "cpu": decode XLA's buffers and attributes, find the communicator, run the host
// backend on the calling device's thread, and turn any failure into an ffi::Error.
//
// Operands: x (the local block(s)), partition (u32 scalar: XLA's partition id of this device, which the
// communicator maps to its group and rank), and optionally the previous collective's result, never read: it only
// orders the calls (jax_mscclpp/_ordering.py). Attributes: comm_id, op, algorithm (codes of jax_mscclpp/codes.def),
// plan_id (the registered execution plan when algorithm is kPlan, else -1). The permutation's handler also takes
// destinations (int32[world]: the rank each rank sends its block to, -1 for none; no two the same).
#include <chrono>

#include "call_decoding.h"
#include "collective_types.h"
#include "handlers.h"
#include "host_collectives.h"
#include "host_executor.h"
#include "host_failure_status.h"
#include "registry.h"
#include "runtime_settings.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_mscclpp {
namespace {

ffi::Error run_cpu(Collective collective, ffi::AnyBuffer x, ffi::AnyBuffer partition, ffi::Result<ffi::AnyBuffer> y,
                   int64_t comm_id, int32_t op, int32_t algorithm, int64_t plan_id,
                   const ffi::Span<const int32_t>* destinations) {
  const Collective kCollective = collective;
  auto comm = find_host_communicator(comm_id);
  if (!comm)
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_mscclpp: communicator " + std::to_string(comm_id) +
                          " was destroyed (Communicator.destroy(), or replaced after a failed call) after this program was "
                          "compiled; jax_mscclpp.reset() or jax.clear_caches() (or a new jax.jit) lowers it again "
                          "with a fresh communicator");
  const DType dtype = to_dtype(x.element_type());
  if (dtype == DType::kInvalid || y->element_type() != x.element_type())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: unsupported or mismatched element type");
  if (partition.element_type() != ffi::DataType::U32 || partition.element_count() != 1)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_mscclpp: partition operand must be a u32 scalar");
  size_t block = 0;
  if (!block_count_of(kCollective, x.element_count(), y->element_count(), comm->world_size(), &block)) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      std::string("jax_mscclpp: ") + collective_name(kCollective) + " got " +
                          std::to_string(x.element_count()) + " input and " + std::to_string(y->element_count()) +
                          " output elements for world size " + std::to_string(comm->world_size()));
  }
  const int pid = int(*static_cast<const uint32_t*>(partition.untyped_data()));
  CollectiveCall call{kCollective, ReduceOp(op), Algorithm(algorithm), dtype, x.untyped_data(), y->untyped_data(),
                      block};
  if (destinations != nullptr) {
    const int rank = comm->rank_index(pid);
    if (rank < 0 || !permute_peers(*destinations, comm->world_size(), rank, &call.send_to, &call.recv_from))
      return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                        "jax_mscclpp: permute got a destination table that is not a partial permutation of " +
                            std::to_string(comm->world_size()) + " ranks (or partition " + std::to_string(pid) +
                            " is not part of communicator " + std::to_string(comm_id) + ")");
  }
  host::HostFailure failure;
  const auto started = host::Clock::now();
  if (call.algorithm == Algorithm::kPlan) {
    auto plan = comm->find_plan(plan_id);
    if (!plan)
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                        "jax_mscclpp: plan " + std::to_string(plan_id) + " is not registered with communicator " +
                            std::to_string(comm_id));
    failure = host::run_plan(*comm, *plan, plan_id, pid, call, timeout_seconds());
  } else {
    failure = host::run_collective(*comm, pid, call, timeout_seconds());
  }
  if (failure.failed()) {
    bool broken = false;
    if (host::HostGroup* group = comm->group_of(pid)) {
      group->record_failure(comm->rank_index(pid),
                            std::chrono::duration<double>(host::Clock::now() - started).count(), failure.message);
      broken = group->broken.load(std::memory_order_acquire);
    }
    return host_failure_error(failure, broken);
  }
  return ffi::Error::Success();
}

template <Collective kCollective>
ffi::Error collective_cpu(ffi::AnyBuffer x, ffi::AnyBuffer partition, ffi::RemainingArgs /*predecessor*/,
                          ffi::Result<ffi::AnyBuffer> y,
                          int64_t comm_id, int32_t op, int32_t algorithm, int64_t plan_id) {
  return run_cpu(kCollective, x, partition, y, comm_id, op, algorithm, plan_id, nullptr);
}

ffi::Error permute_cpu(ffi::AnyBuffer x, ffi::AnyBuffer partition, ffi::RemainingArgs /*predecessor*/,
                       ffi::Result<ffi::AnyBuffer> y, int64_t comm_id, int32_t op, int32_t algorithm, int64_t plan_id,
                       ffi::Span<const int32_t> destinations) {
  return run_cpu(Collective::kPermute, x, partition, y, comm_id, op, algorithm, plan_id, &destinations);
}

// What every collective's handler takes (call_decoding.h); the permutation adds its destination table.
auto common_cpu_binding() {
  return ffi::Ffi::Bind()
      .Arg<ffi::AnyBuffer>()
      .Arg<ffi::AnyBuffer>()
      .RemainingArgs()
      .Ret<ffi::AnyBuffer>()
      .Attr<int64_t>("comm_id")
      .Attr<int32_t>("op")
      .Attr<int32_t>("algorithm")
      .Attr<int64_t>("plan_id");
}

// One handler per collective row of codes.def, named after its enumerator (kAllReduce -> kAllReduceCpu).
#define JAX_MSCCLPP_COLLECTIVE(enumerator, ...)                                     \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(enumerator##Cpu,                                                    \
                                (implementation_of<Collective::enumerator, permute_cpu,               \
                                                   collective_cpu<Collective::enumerator>>()),        \
                                binding_of<Collective::enumerator>(common_cpu_binding));
#include "jax_mscclpp/codes.def"

}  // namespace

const HandlerList& cpu_handlers() {
  static const HandlerList handlers = {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, ...)                                     \
  {target_name(Collective::enumerator), reinterpret_cast<void*>(enumerator##Cpu)},
#include "jax_mscclpp/codes.def"
  };
  return handlers;
}

}  // namespace jax_mscclpp
