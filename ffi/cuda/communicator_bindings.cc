// Bindings of the GPU communicators (communicator.h): jax_mscclpp._jax_mscclpp.cuda.comm_*.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "check.h"
#include "collectives/epilogue.h"
#include "communicator.h"
#include "host_plan.h"
#include "rank_setup.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {
namespace {

// The frontend's meeting place as Python callables (jax_mscclpp/communicator.py: a dict in one process, JAX's
// key-value store across processes); what they raise propagates to the caller.
class PythonExchange : public Exchange {
 public:
  PythonExchange(nb::callable publish, nb::callable fetch) : publish_(std::move(publish)), fetch_(std::move(fetch)) {}
  void publish(int rank, const std::string& frame) override { publish_(rank, nb::bytes(frame.data(), frame.size())); }
  std::string fetch(int rank) override {
    nb::bytes frame = nb::cast<nb::bytes>(fetch_(rank));
    return std::string(static_cast<const char*>(frame.data()), frame.size());
  }

 private:
  nb::callable publish_, fetch_;
};

GpuRank& rank_of(int64_t comm_id, int device) {
  auto comm = find_gpu_communicator(comm_id);
  GpuRank* rank = comm ? comm->rank(device) : nullptr;
  if (!rank) throw nb::value_error("no such communicator rank");
  return *rank;
}

}  // namespace

void register_communicator_bindings(nb::module_& m) {
  m.attr("default_scratch_bytes") = kGpuScratchBytes;
  m.def(
      "comm_create_rank",
      [](int64_t comm_id, int device, int rank, int nranks, size_t scratch_bytes, bool port_channels) {
        RankOptions options = gpu_rank_options(device, rank, nranks, scratch_bytes);
        // XLA's buffers, reached in place by the ranks of other processes: XLA's allocations are cuMem's, which
        // travel only as file descriptors, so without them no call would ever agree (each would wait for the
        // peers' words for nothing).
        options.exchange_allocations = options.map_cumem;
        create_gpu_communicator(comm_id)->create_rank(device, options, port_channels);
      },
      nb::arg("comm_id"), nb::arg("device"), nb::arg("rank"), nb::arg("nranks"), nb::arg("scratch_bytes"),
      nb::arg("port_channels"),
      "Allocates one rank's registered scratch and semaphores on `device` (runtime/gpu/rank_context.h, "
      "gpu_rank_options).");
  m.def(
      "comm_connect_all",
      [](int64_t comm_id, const std::vector<std::tuple<int, int, std::vector<int>>>& ranks, nb::callable publish,
         nb::callable fetch) {
        std::vector<LocalRank> local;
        for (const auto& [device, index, group] : ranks) local.push_back({&rank_of(comm_id, device), index, group});
        PythonExchange exchange(std::move(publish), std::move(fetch));
        return connect_all(local, exchange).shares_gpu;
      },
      nb::arg("comm_id"), nb::arg("ranks"), nb::arg("publish"), nb::arg("fetch"),
      "The runtime's one setup (runtime/gpu/rank_setup.h, connect_all) of this process's ranks of the communicator, "
      "`ranks` as (device, rank, the ranks of its group): publish(rank, bytes) makes a rank's frame readable by "
      "every rank, fetch(rank) returns one (raising after the timeout). Returns whether two ranks drive one GPU.");
  m.def(
      "comm_bind_plan",
      [](int64_t comm_id, int device, int64_t plan_id, std::string name, int collective, int world_size,
         std::vector<int32_t> geometry, std::vector<std::vector<std::vector<int32_t>>> channels,
         std::vector<std::vector<std::vector<int32_t>>> threadblocks) {
        GpuRank& rank = rank_of(comm_id, device);
        rank.bind_plan(plan_id, host::HostPlan::decode(std::move(name), collective, world_size, std::move(geometry),
                                                       std::move(channels), std::move(threadblocks)));
      },
      nb::arg("comm_id"), nb::arg("device"), nb::arg("plan_id"), nb::arg("name"), nb::arg("collective"),
      nb::arg("world_size"), nb::arg("geometry"), nb::arg("channels"), nb::arg("threadblocks"),
      "Binds an encoded execution plan (jax_mscclpp.plan_encoding.encode_plan) to the communicator's rank on `device`, "
      "for the GPU executor (once per plan id).");
  m.def("comm_destroy", &destroy_gpu_communicator, nb::arg("comm_id"));
  m.def(
      "comm_errors",
      [](int64_t comm_id) {
        auto comm = find_gpu_communicator(comm_id);
        return comm ? comm->errors() : std::vector<std::string>{};
      },
      nb::arg("comm_id"), "Timeout records of this communicator's ranks (rank, peer, operation, epoch).");
  m.def(
      "comm_stopped_on_failure",
      [](int64_t comm_id) {
        auto comm = find_gpu_communicator(comm_id);
        return comm && comm->stopped_on_failure();
      },
      nb::arg("comm_id"),
      "Whether a kernel of a rank of this communicator failed and stopped (JAX_MSCCLPP_TRAP_ON_FAILURE=0), so that "
      "the communicator refuses every later call while the GPU context stays usable.");
  m.def(
      "comm_in_place_between_processes",
      [](int64_t comm_id) {
        uint64_t in_place = 0, through_scratch = 0;
        std::string absence;
        if (auto comm = find_gpu_communicator(comm_id))
          comm->for_each_rank([&](GpuRank& rank) {
            in_place += rank.in_place_between_processes();
            through_scratch += rank.through_scratch_between_processes();
            if (absence.empty()) absence = rank.in_place_between_processes_absence();
          });
        return std::make_tuple(in_place, through_scratch, absence);
      },
      nb::arg("comm_id"),
      "Of this process's ranks' calls that could run in place between processes (runtime/gpu/allocation_exchange.h): "
      "how many did, how many copied through scratch because some rank's buffers were not reachable, and why none "
      "may (\"\" where they may).");
  m.def(
      "gpu_identity",
      [](int device) {
        FrameWriter out;
        write_gpu_identity(out, local_gpu_identity(device));
        return nb::bytes(out.bytes().data(), out.bytes().size());
      },
      nb::arg("device"),
      "Where a rank on local GPU `device` runs (runtime/common/gpu_identity.h: host, process, GPU UUID and name), "
      "as the setup's identity round sends it (identities_share_a_gpu reads it).");
  m.def(
      "can_access_peer",
      [](int device, int peer) {
        int ok = 0;
        if (cudaDeviceCanAccessPeer(&ok, device, peer) != cudaSuccess) {
          (void)cudaGetLastError();
          return false;
        }
        return ok != 0;
      },
      nb::arg("device"), nb::arg("peer"));
  m.def("epilogue_supported", &epilogue_supported, nb::arg("nranks"), nb::arg("count"), nb::arg("row"),
        nb::arg("dtype"), nb::arg("scratch_bytes"),
        "Whether the fused all_reduce + epilogue kernel runs a call of `count` elements in rows of `row`.");
}

}  // namespace jax_mscclpp::cuda
