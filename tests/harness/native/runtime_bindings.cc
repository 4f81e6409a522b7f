// Queries of the CUDA runtime and of the module's own process-wide state, for the tests.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "bindings.h"
#include "check.h"
#include "collectives/algorithms.h"
#include "collectives/epilogue.h"
#include "collectives/collective.h"
#include "memory.h"
#include "nvls.h"
#include "proxy.h"
#include "runtime_config.h"
#include "runtime_settings.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {

namespace {

using Words = std::tuple<uint32_t, uint32_t, uint32_t>;  // CallWords: call, count, variant

CallWords to_words(const Words& w) { return {std::get<0>(w), std::get<1>(w), std::get<2>(w)}; }

// describe_error on a record made here: `op` a WaitOp code, plan names by fingerprint.
std::string describe_record(uint32_t op, int rank, int peer, uint64_t epoch, uint64_t observed, const Words& mine,
                            uint32_t mine_epoch, const Words& theirs, uint32_t theirs_epoch,
                            const std::map<uint32_t, std::string>& plans, uint32_t interrupted_op) {
  ErrorRecord r = wait_record_of(op, rank, peer, epoch, observed, 5000000000ull);
  r.interrupted_op = interrupted_op;
  r.mine = to_words(mine);
  r.theirs = to_words(theirs);
  r.mine_epoch = mine_epoch;
  r.theirs_epoch = theirs_epoch;
  return describe_error(r, 5000000000ull, [&plans](uint32_t f) {
    auto it = plans.find(f);
    return it == plans.end() ? std::string() : it->second;
  });
}

}  // namespace

void register_runtime_queries(nb::module_& m) {
  m.def(
      "call_words",
      [](int32_t collective, int32_t op, int32_t algorithm, int32_t dtype, uint64_t block_count, uint32_t variant) {
        const CallWords w = call_words(collective, op, algorithm, dtype, block_count, variant);
        return Words{w.call, w.count, w.variant};
      },
      nb::arg("collective"), nb::arg("op"), nb::arg("algorithm"), nb::arg("dtype"), nb::arg("block_count"),
      nb::arg("variant") = 0, "The words a launch posts for its call (jax_mscclpp/call_inbox.cuh).");
  m.def("plan_fingerprint", [](const std::string& name) { return plan_fingerprint(name.c_str()); },
        nb::arg("name"));
  m.def("epilogue_variant", &epilogue_variant, nb::arg("epilogue"), nb::arg("row"));
  m.def("wait_op_codes", [] {
    return std::map<std::string, uint32_t>{{"packet_read", uint32_t(WaitOp::kPacketRead)},
                                           {"call_check", uint32_t(WaitOp::kCallCheck)},
                                           {"call_mismatch", uint32_t(WaitOp::kCallMismatch)},
                                           {"peer_failed", uint32_t(WaitOp::kPeerFailed)}};
  });
  m.def("describe_record", &describe_record, nb::arg("op"), nb::arg("rank"), nb::arg("peer"), nb::arg("epoch"),
        nb::arg("observed"), nb::arg("mine"), nb::arg("mine_epoch"), nb::arg("theirs"), nb::arg("theirs_epoch"),
        nb::arg("plans") = std::map<uint32_t, std::string>{}, nb::arg("interrupted_op") = 0,
        "The message of an error record with these fields (runtime/gpu/runtime_config.h, describe_error).");
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
    DeviceGuard g(device);
    size_t free_b = 0, total = 0;
    JAX_MSCCLPP_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    return std::make_pair(free_b, total);
  });
  m.def("timeout_seconds", &jax_mscclpp::timeout_seconds,
        "This module's timeout setting (runtime_settings.h): what ranks made with timeout_s <= 0 take.");
  m.def("set_timeout_seconds", &jax_mscclpp::set_timeout_seconds, nb::arg("seconds"),
        "Sets this module's timeout setting (ranks made afterwards, bootstrap rounds started afterwards).");
  m.def("live_ipc_mappings", &live_ipc_mappings, "CUDA IPC mappings opened by this module and not yet closed.");
  m.def("live_proxy_threads", &ProxyService::live_threads, "Proxy threads of this module running in this process.");
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
      nb::arg("device") = 0, "This module's proxy service of `device`, if one exists.");
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
  m.def("epilogue_supported", &epilogue_supported, nb::arg("nranks"), nb::arg("count"), nb::arg("row"),
        nb::arg("dtype"), nb::arg("scratch_bytes"));
  m.def("collective_supported", &collective_supported, nb::arg("collective"), nb::arg("algorithm"), nb::arg("dtype"),
        nb::arg("op"), "Whether launch_collective implements (collective, algorithm) for this dtype/op code.");
  m.def(
      "collective_launch_count",
      [](int32_t collective, int32_t algorithm, uint64_t block_count, int32_t dtype, int32_t nranks,
         uint64_t scratch_bytes, bool shares_gpu) {
        return collective_launch_count(collective, algorithm, block_count, dtype, nranks,
                                       codes::placement_of(shares_gpu), scratch_bytes, stream_tuning_setting());
      },
      nb::arg("collective"), nb::arg("algorithm"), nb::arg("block_count"), nb::arg("dtype"), nb::arg("nranks"),
      nb::arg("scratch_bytes"), nb::arg("shares_gpu") = true,
      "Launches (epochs) one call takes with the process's stream settings, on ranks sharing a GPU (virtual "
      "ranks) unless `shares_gpu` is false; 0 when it launches nothing or cannot run.");
  m.def(
      "stream_settings",
      [] {
        const StreamTuning t = stream_tuning_setting();
        return std::make_tuple(stream_blocks_setting(), t.block_bytes, t.max_chunk, t.slots);
      },
      "(blocks, block_bytes, max_chunk, slots) of the streaming kernels as this process's settings give them.");
  m.def(
      "production_stream_blocks",
      [](int ranks_on_gpu, int device) { return shared_gpu_grid(device_stream_blocks(device), ranks_on_gpu); },
      nb::arg("ranks_on_gpu"), nb::arg("device") = 0,
      "The streaming and in-place kernels' grid that a rank gets in production when `ranks_on_gpu` ranks of one "
      "process drive `device` (this process's settings, the device's multiprocessors): what the benchmarks give "
      "virtual ranks.");
}

}  // namespace jax_mscclpp::cuda
