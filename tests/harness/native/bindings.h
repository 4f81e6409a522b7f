// Python bindings of the test module (module.cc): runtime queries, the virtual ranks and what runs on them.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "rank_context.h"
#include "virtual_rank.h"

namespace jax_mscclpp::cuda {

void register_runtime_queries(nanobind::module_& m);  // runtime_bindings.cc
void register_harness(nanobind::module_& m);          // harness_bindings.cc
void register_executor(nanobind::module_& m);         // executor_bindings.cc
void register_bootstrap(nanobind::module_& m);        // bootstrap_bindings.cc
void register_selection(nanobind::module_& m);        // selection_bindings.cc
void register_allocation_exchange(nanobind::module_& m);  // exchange_bindings.cc

inline nanobind::bytes to_bytes(const std::string& s) { return nanobind::bytes(s.data(), s.size()); }
inline std::string from_bytes(const nanobind::bytes& b) {
  return std::string(static_cast<const char*>(b.data()), b.size());
}

// A published wait record (valid) of a timeout as the device fills one, for the tests of the host's messages.
inline ErrorRecord wait_record_of(uint32_t op, int rank, int peer, uint64_t epoch, uint64_t observed,
                                  uint64_t waited_ns) {
  // claimed, valid, rank, peer, op, block, thread, interrupted_op, epoch, observed, waited_ns; the calls zero
  return ErrorRecord{0, 1, rank, peer, op, 0, 0, 0, epoch, observed, waited_ns};
}

// The constructor every virtual rank class shares: Rank(RankOptions, input_bytes, output_bytes, port_channels).
template <class Rank>
void def_rank_init(nanobind::class_<Rank, VirtualRank>& cls) {
  namespace nb = nanobind;
  cls.def(
      "__init__",
      [](Rank* self, int rank, int nranks, int device, size_t input_bytes, size_t output_bytes, size_t scratch_bytes,
         int channels_per_peer, double timeout_s, bool port_channels, int stream_blocks, int stream_slots,
         uint64_t stream_chunk, bool stop_on_failure, int64_t p2p_bytes, bool direct_exchange) {
        RankOptions o;
        o.device = device;
        o.rank = rank;
        o.nranks = nranks;
        o.scratch_bytes = scratch_bytes;
        o.channels_per_peer = channels_per_peer;
        o.stream_blocks = stream_blocks;
        if (stream_slots > 0) o.stream_tuning.slots = stream_slots;
        if (stream_chunk > 0) o.stream_tuning.max_chunk = stream_chunk;
        o.timeout_s = timeout_s;
        o.stop_on_failure = stop_on_failure;
        o.p2p_bytes = p2p_bytes;
        o.direct_exchange = direct_exchange;
        new (self) Rank(o, input_bytes, output_bytes, port_channels);
      },
      nb::arg("rank"), nb::arg("nranks"), nb::arg("device") = 0, nb::arg("input_bytes") = 1 << 20,
      nb::arg("output_bytes") = 1 << 20, nb::arg("scratch_bytes") = 1 << 20, nb::arg("channels_per_peer") = 1,
      nb::arg("timeout_s") = 0.0, nb::arg("port_channels") = false, nb::arg("stream_blocks") = 4,
      nb::arg("stream_slots") = 0, nb::arg("stream_chunk") = 0, nb::arg("stop_on_failure") = false,
      nb::arg("p2p_bytes") = -1, nb::arg("direct_exchange") = true,
      "timeout_s <= 0: the process's setting (JAX_MSCCLPP_TIMEOUT_S, else 300). stream_blocks: the streaming "
      "kernels' most blocks (every block of every virtual rank on the device must be resident at once). "
      "stream_slots, stream_chunk (a multiple of 16) > 0: in place of the process's settings. stop_on_failure: a "
      "failing kernel stops rather than traps (JAX_MSCCLPP_TRAP_ON_FAILURE=0). p2p_bytes: the point-to-point "
      "engine's slots (< 0: a quarter of the scratch, at most 16 MiB; 0: none). direct_exchange: the ragged "
      "all-to-all writes into the peers' outputs (the ranks share this process) rather than through the rings.");
}

}  // namespace jax_mscclpp::cuda
