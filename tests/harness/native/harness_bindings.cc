// Python bindings of the harness kernels' ranks (harness_rank.h), the proxy FIFO probe (fifo_probe.h) and the
// launch floor (launch_floor.h).
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "bindings.h"
#include "fifo_probe.h"
#include "harness.h"
#include "harness_rank.h"
#include "launch_floor.h"
#include "ragged_tables.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {

void register_harness(nb::module_& m) {
  m.attr("HARNESS_COUNTERS") = kHarnessCounters;
  nb::dict ops;
  ops["hb_exchange"] = static_cast<int>(HarnessOp::kHbExchange);
  ops["ll_exchange"] = static_cast<int>(HarnessOp::kLlExchange);
  ops["hb_epochs"] = static_cast<int>(HarnessOp::kHbEpochs);
  ops["elements"] = static_cast<int>(HarnessOp::kElements);
  ops["reduce_put"] = static_cast<int>(HarnessOp::kReducePut);
  ops["barrier"] = static_cast<int>(HarnessOp::kRelaxedBarrier);
  ops["port_exchange"] = static_cast<int>(HarnessOp::kPortExchange);
  ops["port_flush_check"] = static_cast<int>(HarnessOp::kPortFlushCheck);
  ops["switch_all_reduce"] = static_cast<int>(HarnessOp::kSwitchAllReduce);
  ops["reduce_local"] = static_cast<int>(HarnessOp::kReduceLocal);
  ops["wait_forever"] = static_cast<int>(HarnessOp::kWaitForever);
  ops["copy_bench"] = static_cast<int>(HarnessOp::kCopyBench);
  ops["ping_pong"] = static_cast<int>(HarnessOp::kPingPong);
  ops["port_latency"] = static_cast<int>(HarnessOp::kPortLatency);
  ops["all_reduce_1pa_ll"] = static_cast<int>(HarnessOp::kAllReduce1paLL);
  ops["collective"] = static_cast<int>(HarnessOp::kCollective);
  ops["all_reduce_epilogue"] = static_cast<int>(HarnessOp::kAllReduceEpilogue);
  ops["permute"] = static_cast<int>(HarnessOp::kPermute);
  m.attr("HARNESS_OPS") = ops;

  nb::class_<HarnessParams>(m, "HarnessParams")
      .def(nb::init<>())
      .def_rw("op", &HarnessParams::op)
      .def_rw("blocks", &HarnessParams::blocks)
      .def_rw("threads", &HarnessParams::threads)
      .def_rw("iters", &HarnessParams::iters)
      .def_rw("mode", &HarnessParams::mode)
      .def_rw("packet", &HarnessParams::packet)
      .def_rw("dtype", &HarnessParams::dtype)
      .def_rw("reduce_op", &HarnessParams::reduce_op)
      .def_rw("nsrc", &HarnessParams::nsrc)
      .def_rw("peer", &HarnessParams::peer)
      .def_rw("bytes", &HarnessParams::bytes)
      .def_rw("count", &HarnessParams::count)
      .def_rw("src_off", &HarnessParams::src_off)
      .def_rw("dst_off", &HarnessParams::dst_off)
      .def_rw("slot_stride", &HarnessParams::slot_stride)
      .def_rw("collective", &HarnessParams::collective)
      .def_rw("algorithm", &HarnessParams::algorithm)
      .def_rw("destinations_lo", &HarnessParams::destinations_lo)
      .def_rw("destinations_hi", &HarnessParams::destinations_hi);

  m.def("time_launch_floor", &time_launch_floor, nb::arg("device"), nb::arg("calls"), nb::arg("rounds"),
        nb::arg("issue_order_calls"), nb::call_guard<nb::gil_scoped_release>(),
        "each round's host microseconds per launch of an empty kernel (with issue_order_calls: and the call entry's "
        "capture query and event record after it)");

  nb::class_<HarnessRank, VirtualRank> harness_rank(m, "HarnessRank",
                                                   "A virtual rank running the harness kernels (harness_rank.h).");
  def_rank_init(harness_rank);
  harness_rank
      .def("launch", &HarnessRank::launch, nb::call_guard<nb::gil_scoped_release>())
      .def("call_algorithm", &HarnessRank::call_algorithm, nb::arg("params"),
           "the algorithm code GpuRank::run runs for this collective call (direct_algorithm: in_place where the "
           "ranks reach each other's buffers)")
      .def_static("time_call_entry", &HarnessRank::time_call_entry, nb::arg("ranks"), nb::arg("params"),
                  nb::arg("calls"), nb::arg("rounds"), nb::call_guard<nb::gil_scoped_release>(),
                  "each round's host microseconds per rank call of GpuRank::run, as the JAX path calls it")
      .def("counters", &HarnessRank::counters)
      .def("capture", &HarnessRank::capture, nb::call_guard<nb::gil_scoped_release>())
      .def("replay", &HarnessRank::replay, nb::call_guard<nb::gil_scoped_release>())
      .def("record_start", &HarnessRank::record_start)
      .def("record_stop", &HarnessRank::record_stop)
      .def("elapsed_ms", &HarnessRank::elapsed_ms, nb::call_guard<nb::gil_scoped_release>())
      .def("time_memcpy", &HarnessRank::time_memcpy, nb::call_guard<nb::gil_scoped_release>())
      .def("p2p_group", &HarnessRank::p2p_group, nb::arg("messages"),
           "launch_p2p_group of [(buffer 0 input / 1 output / -1 null, offset, bytes, peer, receive 0/1)] on the "
           "rank's stream (asynchronous)")
      .def("capture_p2p_groups", &HarnessRank::capture_p2p_groups, nb::arg("groups"),
           "captures the groups (lists of p2p_group's messages), one launch each, into a CUDA graph (replay())")
      .def(
          "ragged_all_to_all",
          [](HarnessRank& r, uint64_t operand_offset, uint64_t operand_rows, uint64_t output_offset,
             uint64_t output_rows, uint64_t row_bytes, std::vector<int64_t> input_offsets,
             std::vector<int64_t> send_sizes, std::vector<int64_t> output_offsets, std::vector<int64_t> recv_sizes,
             int index_bytes) {
            r.ragged_all_to_all({operand_offset, operand_rows, output_offset, output_rows, row_bytes,
                                  std::move(input_offsets), std::move(send_sizes), std::move(output_offsets),
                                  std::move(recv_sizes), index_bytes});
          },
          nb::arg("operand_offset"), nb::arg("operand_rows"), nb::arg("output_offset"), nb::arg("output_rows"),
          nb::arg("row_bytes"), nb::arg("input_offsets"), nb::arg("send_sizes"), nb::arg("output_offsets"),
          nb::arg("recv_sizes"), nb::arg("index_bytes") = 4, nb::call_guard<nb::gil_scoped_release>(),
          "launch_ragged_all_to_all on the rank's stream (asynchronous): the operand is operand_rows rows of "
          "row_bytes at byte operand_offset of the input buffer, the output output_rows rows at byte output_offset "
          "of the output buffer; the four tables (lists of nranks ints) are written to a device buffer of the rank's "
          "as index_bytes-wide integers (4: int32, 8: int64) by a kernel on the stream before the call")
      .def("capture_ragged_all_to_all", &HarnessRank::capture_ragged_all_to_all, nb::arg("calls"),
           nb::call_guard<nb::gil_scoped_release>(),
           "captures the calls, each a tuple of ragged_all_to_all's ten arguments in order, into a CUDA graph "
           "(replay()); their tables are written to the device before the capture (waits for the rank's stream)")
      .def("set_captured_ragged_tables", &HarnessRank::set_captured_ragged_tables, nb::arg("tables"),
           nb::call_guard<nb::gil_scoped_release>(),
           "rewrites the captured calls' tables, one (input_offsets, send_sizes, output_offsets, recv_sizes) per "
           "call in order, on the device (waits for the rank's stream): the next replay() reads them");

  m.attr("P2P_MAX_MESSAGES") = kP2PMaxMessages;
  m.attr("RAGGED_TABLE_MAX_RANKS") = kRaggedTableMaxRanks;
  m.def(
      "p2p_layout",
      [](int nranks, int64_t p2p_bytes, uint64_t scratch_bytes) {
        const uint64_t budget = p2p_bytes < 0 ? p2p_default_bytes(scratch_bytes) : static_cast<uint64_t>(p2p_bytes);
        const P2PLayout l = P2PLayout::of(nranks, budget);
        nb::dict d;
        d["budget"] = budget;
        d["chunk"] = l.chunk;
        d["slots"] = l.slots;
        d["region_bytes"] = l.region_bytes;
        d["lanes"] = kP2PLanes;
        d["min_lane_bytes"] = kP2PMinLaneBytes;
        return d;
      },
      nb::arg("nranks"), nb::arg("p2p_bytes") = -1, nb::arg("scratch_bytes") = 1 << 20,
      "the point-to-point layout (kernels/collectives/p2p_layout.h) of a rank with these options");
  m.def(
      "p2p_lane_parts",
      [](uint64_t bytes) {
        std::vector<std::tuple<uint64_t, uint64_t>> parts;
        for (uint32_t l = 0; l < p2p_lanes(bytes); ++l) {
          const P2PLanePart p = p2p_lane_part(bytes, l);
          parts.emplace_back(p.lo, p.hi);
        }
        return parts;
      },
      nb::arg("bytes"), "the lane parts [(lo, hi)] a message of `bytes` bytes is cut into");

  nb::class_<FifoProbe>(m, "FifoProbe")
      .def(nb::init<int, uint32_t, double>(), nb::arg("device") = 0, nb::arg("fifo_size") = 16,
           nb::arg("timeout_s") = 0.0)
      .def(
          "run",
          [](FifoProbe& p, uint32_t ntriggers, uint32_t pushers, uint32_t sleep_every, uint32_t sleep_us) {
            FifoProbeResult r;
            {
              nb::gil_scoped_release release;
              r = p.run(ntriggers, pushers, sleep_every, sleep_us);
            }
            nb::dict d;
            d["received"] = r.received;
            d["distinct"] = r.distinct;
            d["in_order"] = r.in_order;
            d["tail"] = r.tail;
            d["wraps"] = r.wraps;
            d["elapsed_ms"] = r.elapsed_ms;
            d["longest_trigger_s"] = r.longest_trigger_s;
            d["proxy_error"] = r.proxy_error;
            return d;
          },
          nb::arg("ntriggers"), nb::arg("pushers") = 1, nb::arg("sleep_every") = 0, nb::arg("sleep_us") = 0);
}

}  // namespace jax_mscclpp::cuda
