// Python bindings of the harness kernels' ranks (harness_rank.h) and the proxy FIFO probe (fifo_probe.h).
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "fifo_probe.h"
#include "harness.h"
#include "harness_rank.h"

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

  nb::class_<HarnessRank, VirtualRank> harness_rank(m, "HarnessRank",
                                                   "A virtual rank running the harness kernels (harness_rank.h).");
  def_rank_init(harness_rank);
  harness_rank
      .def("launch", &HarnessRank::launch, nb::call_guard<nb::gil_scoped_release>())
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
           "captures the groups (lists of p2p_group's messages), one launch each, into a CUDA graph (replay())");

  m.attr("P2P_MAX_MESSAGES") = kP2PMaxMessages;
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
