// The private native module jax_mscclpp._jax_mscclpp: FFI registrations and the communicator setup calls.
// Python orchestrates (mesh, ranks, selection); this module does the mechanics.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "call_decoding.h"
#include "collective_types.h"
#include "gpu_identity.h"
#include "handlers.h"
#include "host_communicator.h"
#include "host_executor.h"
#include "registry.h"
#include "runtime_settings.h"

#ifdef JAX_MSCCLPP_WITH_CUDA
#include "cuda/bindings.h"
#include "communicator.h"
#endif

namespace nb = nanobind;
using namespace jax_mscclpp;

namespace jax_mscclpp {
void register_select_bindings(nb::module_& m);  // select_bindings.cc: the submodule `select`
}  // namespace jax_mscclpp

namespace {

nb::dict handler_dict(const HandlerList& handlers) {
  nb::dict d;
  for (const auto& [name, fn] : handlers) d[name.c_str()] = nb::capsule(fn);
  return d;
}

#if JAX_MSCCLPP_TESTING
// The faults of the rank at `partition` of host communicator `comm_id` (test hooks), else a ValueError.
host::InjectedFaults& injected_faults(int64_t comm_id, int partition) {
  auto comm = find_host_communicator(comm_id);
  if (!comm) throw nb::value_error("no such communicator");
  auto* state = comm->rank_state(partition);
  if (!state) throw nb::value_error("partition out of range");
  return *state->faults;
}
#endif

nb::dict code_row(const char* enumerator, int code, const char* name) {
  nb::dict row;
  row["enumerator"] = enumerator;
  row["code"] = code;
  row["name"] = name;
  return row;
}

// Every table of kernels/include/jax_mscclpp/codes.def, for jax_mscclpp/_types.py: {table: [row dict, ...]}.
nb::dict code_tables() {
  nb::list collectives, reduce_ops, dtypes, algorithms, placements, plan_ops, plan_buffers, plan_channels;
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, name, input_blocks, output_blocks, reduces) \
  {                                                                                          \
    nb::dict row = code_row(#enumerator, code, name);                                        \
    row["input_per_rank"] = input_blocks != 0;                                               \
    row["output_per_rank"] = output_blocks != 0;                                             \
    row["reduces"] = reduces != 0;                                                           \
    collectives.append(row);                                                                 \
  }
#define JAX_MSCCLPP_REDUCE_OP(enumerator, code, name) reduce_ops.append(code_row(#enumerator, code, name));
#define JAX_MSCCLPP_DTYPE(enumerator, code, name, bytes, host_type, device_type, nccl_type, xla_type) \
  {                                                                                                   \
    nb::dict row = code_row(#enumerator, code, name);                                                 \
    row["bytes"] = bytes;                                                                             \
    row["host_type"] = #host_type;                                                                    \
    row["device_type"] = #device_type;                                                                \
    row["nccl_type"] = #nccl_type;                                                                    \
    row["xla_type"] = #xla_type;                                                                      \
    dtypes.append(row);                                                                               \
  }
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name, collectives_mask, host, needs) \
  {                                                                           \
    nb::dict row = code_row(#enumerator, code, name);                         \
    row["collectives"] = int(collectives_mask);                               \
    row["host"] = #host;                                                      \
    row["needs"] = #needs;                                                    \
    algorithms.append(row);                                                   \
  }
#define JAX_MSCCLPP_PLACEMENT(enumerator, code, name) placements.append(code_row(#enumerator, code, name));
#define JAX_MSCCLPP_PLAN_OP(enumerator, code, name) plan_ops.append(code_row(#enumerator, code, name));
#define JAX_MSCCLPP_PLAN_BUFFER(enumerator, code, name) plan_buffers.append(code_row(#enumerator, code, name));
#define JAX_MSCCLPP_PLAN_CHANNEL(enumerator, code, name) plan_channels.append(code_row(#enumerator, code, name));
#include "jax_mscclpp/codes.def"
  nb::dict tables;
  tables["collective"] = collectives;
  tables["reduce_op"] = reduce_ops;
  tables["dtype"] = dtypes;
  tables["algorithm"] = algorithms;
  tables["placement"] = placements;
  tables["plan_op"] = plan_ops;
  tables["plan_buffer"] = plan_buffers;
  tables["plan_channel"] = plan_channels;
  return tables;
}

}  // namespace

NB_MODULE(_jax_mscclpp, m) {
  m.doc() = "Native core of jax_mscclpp (private).";

  m.def(
      "registrations",
      [] {
        nb::dict platforms;
        platforms["cpu"] = handler_dict(cpu_handlers());
#ifdef JAX_MSCCLPP_WITH_CUDA
        platforms["CUDA"] = handler_dict(cuda_handlers());
#endif
        return platforms;
      },
      "FFI targets by platform: {platform: {target name: capsule}}. Only targets that work are listed.");

  m.attr("OUTSIDE_GRAPHS_SUFFIX") = kOutsideGraphsSuffix;
  m.attr("START_SUFFIX") = kStartSuffix;
  m.attr("DONE_TARGET") = kDoneTarget;

  m.def("cuda_built", [] {
#ifdef JAX_MSCCLPP_WITH_CUDA
    return true;
#else
    return false;
#endif
  });

  jax_mscclpp::register_select_bindings(m);

  m.def("codes", &code_tables,
        "The code tables of kernels/include/jax_mscclpp/codes.def: {table: [{enumerator, code, name, ...}, ...]}.");

  m.def(
      "block_count_of",
      [](int collective, size_t in_elems, size_t out_elems, size_t world) -> nb::object {
        size_t block = 0;
        if (!block_count_of(static_cast<int32_t>(collective), in_elems, out_elems, world, &block)) return nb::none();
        return nb::int_(block);
      },
      nb::arg("collective"), nb::arg("in_elems"), nb::arg("out_elems"), nb::arg("world"),
      "The block's element count of a call (jax_mscclpp/block_layout.h), None when the counts do not fit.");

  m.def(
      "create_host_communicator",
      [](int64_t id, int world_size, std::vector<int> group_of_partition, std::vector<int> rank_of_partition,
         size_t scratch_half_bytes) {
        register_host_communicator(std::make_shared<host::HostCommunicator>(
            id, world_size, std::move(group_of_partition), std::move(rank_of_partition), scratch_half_bytes));
      },
      nb::arg("comm_id"), nb::arg("world_size"), nb::arg("group_of_partition"), nb::arg("rank_of_partition"),
      nb::arg("scratch_half_bytes"),
      "Host backend setup for one (mesh, axes): scratch, semaphores and channels of every group.");

  m.def(
      "register_host_plan",
      [](int64_t comm_id, int64_t plan_id, std::string name, int collective, int world_size,
         std::vector<int32_t> geometry, std::vector<std::vector<std::vector<int32_t>>> channels,
         std::vector<std::vector<std::vector<int32_t>>> threadblocks) {
        auto comm = find_host_communicator(comm_id);
        if (!comm) throw nb::value_error("no such communicator");
        if (world_size != comm->world_size()) throw nb::value_error("the plan's world size differs from the communicator's");
        auto plan = host::HostPlan::decode(std::move(name), collective, world_size, std::move(geometry),
                                           std::move(channels), std::move(threadblocks));
        comm->add_plan(plan_id, std::make_shared<host::HostPlanInstance>(plan, comm->num_groups()));
      },
      nb::arg("comm_id"), nb::arg("plan_id"), nb::arg("name"), nb::arg("collective"), nb::arg("world_size"),
      nb::arg("geometry"), nb::arg("channels"), nb::arg("threadblocks"),
      "Binds an encoded execution plan (jax_mscclpp/plans.py) to a host communicator.");

  m.def("destroy_communicator", &destroy_communicator, nb::arg("comm_id"));
  m.def("live_communicators", &live_communicators);
  m.def("timeout_seconds", &timeout_seconds, "Bound on every wait, seconds (runtime_settings.h).");
  m.def(
      "identities_share_a_gpu",
      [](const std::vector<nb::bytes>& frames) {
        std::vector<GpuIdentity> ranks(frames.size());
        for (size_t i = 0; i < frames.size(); ++i) {
          const std::string frame(frames[i].c_str(), frames[i].size());
          FrameReader in(frame);  // reads `frame` in place
          if (!read_gpu_identity(in, &ranks[i]) || !in.at_end())
            throw nb::value_error("jax_mscclpp: not a GPU identity (cuda.gpu_identity's frame)");
        }
        return share_a_gpu(ranks);
      },
      nb::arg("identities"),
      "Whether two of these ranks' identities (cuda.gpu_identity's frames) drive one physical GPU: the communicators' "
      "setup's rule (runtime/common/gpu_identity.h, share_a_gpu).");
  m.def(
      "set_timeout_seconds",
      [](double seconds) {
        set_timeout_seconds(seconds);
#ifdef JAX_MSCCLPP_WITH_CUDA
        cuda::apply_timeout_to_gpu_communicators();
#endif
      },
      nb::arg("seconds"), "Sets the bound on every wait for the host backend and every GPU rank, alive or to come.");

  m.def(
      "host_failures",
      [](int64_t comm_id) {
        auto comm = find_host_communicator(comm_id);
        if (!comm) throw nb::value_error("no such communicator");
        nb::list out;
        for (int g = 0; g < comm->num_groups(); ++g)
          for (const auto& f : comm->group_of_index(g)->failures())
            out.append(nb::make_tuple(g, f.rank, f.seconds, f.message));
        return out;
      },
      nb::arg("comm_id"),
      "Failed calls of a host communicator, in order per group: (group, rank, seconds into the call, message).");

  m.def(
      "host_broken",
      [](int64_t comm_id) {
        auto comm = find_host_communicator(comm_id);
        if (!comm) throw nb::value_error("no such communicator");
        for (int g = 0; g < comm->num_groups(); ++g)
          if (comm->group_of_index(g)->broken.load(std::memory_order_acquire)) return true;
        return false;
      },
      nb::arg("comm_id"),
      "Whether an earlier failure left a group of a host communicator unusable (its ranks are out of step).");

#if JAX_MSCCLPP_TESTING
  // The fault hooks of jax_mscclpp.testing.faults: the testing build's only (JAX_MSCCLPP_TESTING, root
  // CMakeLists.txt); a module without them has neither name.
  m.def(
      "skip_next_calls",
      [](int64_t comm_id, int partition, int calls) {
        injected_faults(comm_id, partition).skip_calls.store(calls, std::memory_order_relaxed);
      },
      nb::arg("comm_id"), nb::arg("partition"), nb::arg("calls"),
      "Test hook: the rank at `partition` returns at once from its next `calls` calls without taking part.");

  m.def(
      "stop_mid_call",
      [](int64_t comm_id, int partition, int exchanges) {
        host::InjectedFaults& faults = injected_faults(comm_id, partition);
        if (exchanges < 0) throw nb::value_error("exchanges must be at least 0");
        faults.stop_exchanges.store(exchanges, std::memory_order_relaxed);
      },
      nb::arg("comm_id"), nb::arg("partition"), nb::arg("exchanges"),
      "Test hook: the rank at `partition` stops its next built-in collective call after `exchanges` exchanges "
      "with its peers, telling no one (its own call fails).");
#endif

#ifdef JAX_MSCCLPP_WITH_CUDA
  nb::module_ cuda = m.def_submodule("cuda", "CUDA communicators of the JAX path.");
  jax_mscclpp::cuda::register_bindings(cuda);
#endif
}
