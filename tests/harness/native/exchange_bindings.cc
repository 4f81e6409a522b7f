// The allocation exchange of ranks in several processes (runtime/gpu/allocation_exchange.h), for tests without a GPU:
// its outboxes and the word per call by which the ranks agree (there no buffer is reachable, so every call agrees
// on scratch), a peer's process given as the test says.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "allocation_exchange.h"
#include "bindings.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {

void register_allocation_exchange(nb::module_& m) {
  nb::class_<AllocationExchange>(m, "AllocationExchange")
      .def(nb::init<int, int, int, bool>(), nb::arg("rank"), nb::arg("nranks"), nb::arg("device") = 0,
           nb::arg("map_cumem") = false)
      .def_prop_ro("name", &AllocationExchange::name)
      .def("add_peer", &AllocationExchange::add_peer, nb::arg("peer"), nb::arg("name"), nb::arg("process"))
      .def("covers_every_peer", &AllocationExchange::covers_every_peer)
      .def(
          "agree",
          [](AllocationExchange& x, uint64_t in, uint64_t in_bytes, uint64_t out, uint64_t out_bytes,
             double timeout_s) {
            InPlaceBuffers views{};
            bool agreed = false;
            {
              nb::gil_scoped_release release;
              agreed = x.agree(reinterpret_cast<const void*>(in), in_bytes, reinterpret_cast<const void*>(out),
                               out_bytes, timeout_s, views);
            }
            std::vector<std::pair<uint64_t, uint64_t>> seen;
            for (int q = 0; q < kDirectPeers; ++q)
              seen.emplace_back(reinterpret_cast<uint64_t>(views.in[q]), reinterpret_cast<uint64_t>(views.out[q]));
            return std::make_tuple(agreed, seen);
          },
          nb::arg("input"), nb::arg("input_bytes"), nb::arg("output"), nb::arg("output_bytes"), nb::arg("timeout_s"),
          "Whether this call runs in place on every rank, and every rank's view of this rank's buffers where it does.");
}

}  // namespace jax_mscclpp::cuda
