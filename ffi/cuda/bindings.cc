#include "bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>

#include "check.h"
#include "collectives/algorithms.h"
#include "collectives/collective.h"
#include "harness_rank.h"
#include "memory.h"
#include "nvls.h"
#include "proxy.h"
#include "runtime_config.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {
namespace {

nb::bytes to_bytes(const std::string& s) { return nb::bytes(s.data(), s.size()); }
std::string from_bytes(const nb::bytes& b) { return std::string(static_cast<const char*>(b.data()), b.size()); }

}  // namespace

void register_bindings(nb::module_& m) {
  m.def("device_count", [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  });
  m.def("runtime_version", [] {
    int v = 0;
    cudaRuntimeGetVersion(&v);
    return v;
  });
  m.def("driver_version", [] {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) (void)cudaGetLastError();
    return v;
  });
  m.def("device_name", [](int device) {
    cudaDeviceProp prop;
    JAX_MSCCLPP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    return std::string(prop.name);
  });
  m.def("mem_get_info", [](int device) {
    int previous = 0;
    JAX_MSCCLPP_CUDA_CHECK(cudaGetDevice(&previous));
    JAX_MSCCLPP_CUDA_CHECK(cudaSetDevice(device));
    size_t free_b = 0, total = 0;
    JAX_MSCCLPP_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    JAX_MSCCLPP_CUDA_CHECK(cudaSetDevice(previous));
    return std::make_pair(free_b, total);
  });
  m.def("default_timeout_seconds", &default_timeout_seconds,
        "JAX_MSCCLPP_TIMEOUT_S when set to a positive number, else 300.");
  m.def("live_ipc_mappings", &live_ipc_mappings, "CUDA IPC mappings opened by this process and not yet closed.");
  m.def("live_proxy_threads", &ProxyService::live_threads, "Proxy threads running in this process.");
  m.def(
      "proxy_status",
      [](int device) {
        nb::dict d;
        auto s = ProxyService::find_shared(device);
        d["running"] = static_cast<bool>(s);
        if (s) {
          d["signal_path"] = s->signal_path();
          d["triggers_handled"] = s->triggers_handled();
          d["error"] = s->error();
        }
        return d;
      },
      nb::arg("device") = 0, "The process's proxy service of `device`, if one exists.");
  m.def(
      "nvls_policy",
      [](std::optional<std::string> nvls, std::optional<std::string> nccl) {
        NvlsPolicy p = nvls_policy(nvls ? nvls->c_str() : nullptr, nccl ? nccl->c_str() : nullptr);
        return std::make_pair(p.allowed, p.reason);
      },
      nb::arg("jax_mscclpp_nvls").none(), nb::arg("nccl_nvls_enable").none(),
      "Whether the hardware SwitchChannel would be allowed for these variable values, and why.");
  m.def("nvls_policy_from_env", [] {
    NvlsPolicy p = nvls_policy_from_env();
    return std::make_pair(p.allowed, p.reason);
  });
  m.def("multimem_supported", &multimem_supported, nb::arg("dtype"), nb::arg("op"));
  m.def(
      "create_multicast_buffer",
      [](std::vector<int> devices, size_t bytes) {
        MulticastBuffer buf(devices, bytes);  // refuses, before any driver call, unless the policy allows it
        return buf.bytes();
      },
      nb::arg("devices"), nb::arg("bytes"),
      "Creates and frees an NVLink multicast buffer (opt-in: JAX_MSCCLPP_NVLS=1, refused when NCCL_NVLS_ENABLE=0).");
  m.def("all_reduce_1pa_ll_scratch_bytes", &collectives::all_reduce_1pa_ll_scratch_bytes, nb::arg("bytes"),
        nb::arg("nranks"));
  m.def("collective_supported", &collective_supported, nb::arg("collective"), nb::arg("algorithm"), nb::arg("dtype"),
        nb::arg("op"), "Whether launch_collective implements (collective, algorithm) for this dtype/op code.");
  m.def("collective_launch_count", &collective_launch_count, nb::arg("collective"), nb::arg("algorithm"),
        nb::arg("block_count"), nb::arg("dtype"), nb::arg("nranks"), nb::arg("scratch_bytes"),
        "Launches (epochs) one call takes; 0 when it launches nothing or cannot run.");

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
      .def_rw("algorithm", &HarnessParams::algorithm);

  nb::class_<HarnessRank>(m, "HarnessRank")
      .def(
          "__init__",
          [](HarnessRank* self, int rank, int nranks, int device, size_t buffer_bytes, size_t scratch_bytes,
             int channels_per_peer, double timeout_s, bool port_channels, bool collective_ports, int stream_blocks) {
            RankOptions o;
            o.device = device;
            o.rank = rank;
            o.nranks = nranks;
            o.scratch_bytes = scratch_bytes;
            o.channels_per_peer = channels_per_peer;
            o.stream_blocks = stream_blocks;
            o.timeout_s = timeout_s;
            new (self) HarnessRank(o, buffer_bytes, port_channels, collective_ports);
          },
          nb::arg("rank"), nb::arg("nranks"), nb::arg("device") = 0, nb::arg("buffer_bytes") = 1 << 20,
          nb::arg("scratch_bytes") = 1 << 20, nb::arg("channels_per_peer") = 1, nb::arg("timeout_s") = 0.0,
          nb::arg("port_channels") = false, nb::arg("collective_ports") = false, nb::arg("stream_blocks") = 0)
      .def_prop_ro("rank", &HarnessRank::rank)
      .def_prop_ro("nranks", &HarnessRank::nranks)
      .def("endpoint", [](const HarnessRank& r) { return to_bytes(r.endpoint()); })
      .def("connect", [](HarnessRank& r, int peer, nb::bytes ep) { r.connect(peer, from_bytes(ep)); })
      .def("build", &HarnessRank::build)
      .def("upload", [](HarnessRank& r, int which, size_t offset,
                        nb::bytes data) { r.upload(which, offset, from_bytes(data)); })
      .def("download", [](HarnessRank& r, int which, size_t offset,
                          size_t n) { return to_bytes(r.download(which, offset, n)); })
      .def("fill", &HarnessRank::fill)
      .def("launch", &HarnessRank::launch, nb::call_guard<nb::gil_scoped_release>())
      .def("synchronize", &HarnessRank::synchronize, nb::call_guard<nb::gil_scoped_release>())
      .def("counters", &HarnessRank::counters)
      .def("epoch", &HarnessRank::epoch)
      .def("capture", &HarnessRank::capture, nb::call_guard<nb::gil_scoped_release>())
      .def("replay", &HarnessRank::replay, nb::call_guard<nb::gil_scoped_release>())
      .def("record_start", &HarnessRank::record_start)
      .def("record_stop", &HarnessRank::record_stop)
      .def("elapsed_ms", &HarnessRank::elapsed_ms, nb::call_guard<nb::gil_scoped_release>())
      .def("time_memcpy", &HarnessRank::time_memcpy, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_rw("timeout_seconds", &HarnessRank::timeout_seconds, &HarnessRank::set_timeout_seconds)
      .def("error_message", &HarnessRank::error_message)
      .def("close", &HarnessRank::close, nb::call_guard<nb::gil_scoped_release>());

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
            d["proxy_error"] = r.proxy_error;
            return d;
          },
          nb::arg("ntriggers"), nb::arg("pushers") = 1, nb::arg("sleep_every") = 0, nb::arg("sleep_us") = 0);
  register_communicator_bindings(m);
  register_executor_bindings(m);
}

}  // namespace jax_mscclpp::cuda
