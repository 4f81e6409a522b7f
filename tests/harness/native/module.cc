// The test-only native module tests/harness/_jax_mscclpp_testing: the virtual-ranks harness over the same host
// runtime and kernels as jax_mscclpp._jax_mscclpp (its own copy of them, linked from the same static library).
// Built by the CUDA build into tests/harness (CMake option JAX_MSCCLPP_TESTING); never installed, and the
// package never imports it. Its process-wide state (proxy threads, IPC mappings, the timeout setting) is its own.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "virtual_rank.h"

namespace nb = nanobind;
using namespace jax_mscclpp::cuda;

NB_MODULE(_jax_mscclpp_testing, m) {
  m.doc() = "Virtual-ranks test harness of jax_mscclpp (test-only).";
  register_runtime_queries(m);

  nb::class_<VirtualRank>(m, "VirtualRank", "What every virtual rank has (virtual_rank.h); made by a subclass.")
      .def_prop_ro("rank", &VirtualRank::rank)
      .def_prop_ro("nranks", &VirtualRank::nranks)
      .def_prop_ro("device", &VirtualRank::device)
      .def_prop_ro("scratch_bytes", &VirtualRank::scratch_bytes)
      .def("endpoint", [](const VirtualRank& r) { return to_bytes(r.endpoint()); })
      .def("connect", [](VirtualRank& r, int peer, nb::bytes ep) { r.connect(peer, from_bytes(ep)); })
      .def("build", &VirtualRank::build, nb::arg("shares_gpu"))
      .def(
          "upload", [](VirtualRank& r, int which, size_t offset, nb::bytes data) { r.upload(which, offset, from_bytes(data)); },
          nb::arg("which"), nb::arg("offset"), nb::arg("data"))
      .def(
          "download", [](VirtualRank& r, int which, size_t offset, size_t n) { return to_bytes(r.download(which, offset, n)); },
          nb::arg("which"), nb::arg("offset"), nb::arg("n"))
      .def("fill", &VirtualRank::fill, nb::arg("which"), nb::arg("byte_value"))
      .def("synchronize", &VirtualRank::synchronize, nb::call_guard<nb::gil_scoped_release>())
      .def("epoch", &VirtualRank::epoch)
      .def_prop_rw("timeout_seconds", &VirtualRank::timeout_seconds, &VirtualRank::set_timeout_seconds)
      .def("error_message", &VirtualRank::error_message)
      .def("close", &VirtualRank::close, nb::call_guard<nb::gil_scoped_release>());

  register_harness(m);
  register_executor(m);
  register_bootstrap(m);
  register_selection(m);
  register_allocation_exchange(m);
}
