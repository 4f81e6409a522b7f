// Python bindings of decoded plans and the ranks that run them (executor_rank.h; tests/harness/plan_ranks.py).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "check.h"
#include "executor_plan.h"
#include "executor_rank.h"
#include "host_plan.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {
namespace {

// A decoded plan (jax_mscclpp.plan_encoding.encode_plan), shared by every rank it is bound to.
struct ExecutorPlanSpec {
  std::shared_ptr<const host::HostPlan> plan;
};

}  // namespace

void register_executor(nb::module_& m) {
  nb::class_<ExecutorPlanSpec>(m, "ExecutorPlanSpec")
      .def(
          "__init__",
          [](ExecutorPlanSpec* self, std::string name, int collective, int world_size, std::vector<int32_t> geometry,
             std::vector<std::vector<std::vector<int32_t>>> channels,
             std::vector<std::vector<std::vector<int32_t>>> threadblocks) {
            new (self) ExecutorPlanSpec{host::HostPlan::decode(std::move(name), collective, world_size,
                                                               std::move(geometry), std::move(channels),
                                                               std::move(threadblocks))};
            plan_channel_indices(*self->plan);  // endpoints pair up, or a clear error now
          },
          nb::arg("name"), nb::arg("collective"), nb::arg("world_size"), nb::arg("geometry"), nb::arg("channels"),
          nb::arg("threadblocks"), "Decodes an encoded plan (jax_mscclpp.plan_encoding.encode_plan) for the GPU executor.")
      .def_prop_ro("name", [](const ExecutorPlanSpec& s) { return s.plan->name; })
      .def_prop_ro("world_size", [](const ExecutorPlanSpec& s) { return s.plan->world_size; })
      .def_prop_ro("channels_per_peer", [](const ExecutorPlanSpec& s) { return ExecutorPlan::channels_per_peer(*s.plan); })
      .def_prop_ro("uses_port_channels",
                   [](const ExecutorPlanSpec& s) { return ExecutorPlan::uses_port_channels(*s.plan); })
      .def_prop_ro("staging_chunks", [](const ExecutorPlanSpec& s) { return ExecutorPlan::staging_chunks(*s.plan); })
      .def_prop_ro("input_blocks", [](const ExecutorPlanSpec& s) { return s.plan->input_blocks; })
      .def_prop_ro("output_blocks", [](const ExecutorPlanSpec& s) { return s.plan->output_blocks; })
      .def(
          "scratch_bytes",
          [](const ExecutorPlanSpec& s, uint64_t block_count, int32_t dtype) {
            return ExecutorPlan::scratch_bytes_for(*s.plan, block_count, dtype);
          },
          nb::arg("block_count"), nb::arg("dtype"),
          "The smallest registered scratch with which one call of block_count elements per block runs in one launch.")
      .def(
          "channel_indices", [](const ExecutorPlanSpec& s) { return plan_channel_indices(*s.plan); },
          "The RankContext channel index of every channel endpoint, [rank][channel] (-1: switch or self).");

  nb::class_<ExecutorRank, VirtualRank> executor_rank(m, "ExecutorRank",
                                                     "A virtual rank running execution plans (executor_rank.h).");
  def_rank_init(executor_rank);
  executor_rank
      .def(
          "set_plan", [](ExecutorRank& r, const ExecutorPlanSpec& s, int threads) { r.set_plan(s.plan, threads); },
          nb::arg("plan"), nb::arg("threads") = 0)
      .def("plan_info",
           [](const ExecutorRank& r) {
             nb::dict d;
             const ExecutorPlan* p = r.plan();
             if (p == nullptr) return d;
             const DevicePlan& dp = p->device_plan();
             d["threadblocks"] = dp.n_threadblocks;
             d["threads"] = dp.threads;
             d["image_bytes"] = dp.image_bytes;
             d["scratch_chunks"] = dp.scratch_chunks;
             d["staging_chunks"] = dp.staging_chunks;
             d["packets"] = dp.packets != 0;
             d["port_channels"] = dp.port_channels;
             d["switch_channels"] = dp.switch_channels;
             return d;
           })
      .def(
          "launch_count",
          [](const ExecutorRank& r, uint64_t block_count, int32_t dtype) {
            if (r.plan() == nullptr) throw std::runtime_error("jax_mscclpp: no plan bound");
            return plan_launch_count(r.plan()->device_plan(), r.scratch_bytes(), block_count, dtype);
          },
          nb::arg("block_count"), nb::arg("dtype"))
      .def(
          "resident_blocks",
          [](const ExecutorRank& r, int32_t dtype, int32_t op) {
            if (r.plan() == nullptr) throw std::runtime_error("jax_mscclpp: no plan bound");
            DeviceGuard on(r.device());
            return plan_resident_blocks(r.plan()->device_plan(), dtype, op);
          },
          nb::arg("dtype"), nb::arg("op"),
          "The most blocks of the bound plan's kernel for `dtype` and `op` this rank's GPU holds at once "
          "(kernels/executor/executor.h, plan_resident_blocks).")
      .def("launch_plan", &ExecutorRank::launch_plan, nb::arg("block_count"), nb::arg("dtype"), nb::arg("op"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("launch_collective", &ExecutorRank::launch_collective, nb::arg("collective"), nb::arg("algorithm"),
           nb::arg("block_count"), nb::arg("dtype"), nb::arg("op"), nb::call_guard<nb::gil_scoped_release>());

  m.def(
      "time_calls",
      [](std::vector<ExecutorRank*> ranks, int kind, int collective, int algorithm, uint64_t block_count,
         int32_t dtype, int32_t op, int repeats, int samples) {
        TimedCall c;
        c.kind = kind;
        c.collective = collective;
        c.algorithm = algorithm;
        c.block_count = block_count;
        c.dtype = dtype;
        c.op = op;
        nb::gil_scoped_release release;
        return time_calls(ranks, c, repeats, samples);
      },
      nb::arg("ranks"), nb::arg("kind"), nb::arg("collective"), nb::arg("algorithm"), nb::arg("block_count"),
      nb::arg("dtype"), nb::arg("op"), nb::arg("repeats"), nb::arg("samples"),
      "Milliseconds per call (one per sample) of `repeats` back-to-back calls on every rank, released together "
      "from launch gates. kind 0: the bound plan; 1: launch_collective(collective, algorithm).");
}

}  // namespace jax_mscclpp::cuda
