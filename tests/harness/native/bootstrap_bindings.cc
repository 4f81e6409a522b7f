// The NCCL-API library's rendezvous (nccl/runtime/bootstrap.h) and unique id, for tests without a GPU: a root, its
// clients as ranks, rounds of all-gather, and the id's round trip.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "bootstrap.h"
#include "unique_id.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {

void register_bootstrap(nb::module_& m) {
  using jax_mscclpp::nccl::BootstrapAddress;
  using jax_mscclpp::nccl::BootstrapClient;
  m.def(
      "bootstrap_root",
      [] {
        const BootstrapAddress a = jax_mscclpp::nccl::start_bootstrap_root();
        return std::make_tuple(a.ipv4, a.port, a.nonce);
      },
      "Starts a bootstrap root; (ipv4, port, nonce), the first two in network byte order.");
  nb::class_<BootstrapClient>(m, "BootstrapClient")
      .def(
          "__init__",
          [](BootstrapClient* self, std::tuple<uint32_t, uint16_t, uint64_t> root, int rank, int nranks) {
            new (self) BootstrapClient({std::get<0>(root), std::get<1>(root), std::get<2>(root)}, rank, nranks);
          },
          nb::arg("root"), nb::arg("rank"), nb::arg("nranks"), nb::call_guard<nb::gil_scoped_release>())
      .def(
          "all_gather",
          [](BootstrapClient& c, nb::bytes mine) {
            const std::string frame(static_cast<const char*>(mine.data()), mine.size());
            std::vector<std::string> frames;
            {
              nb::gil_scoped_release release;
              frames = c.all_gather(frame, "a test round");
            }
            std::vector<nb::bytes> out;
            for (const std::string& f : frames) out.emplace_back(f.data(), f.size());
            return out;
          },
          nb::arg("mine"));
  m.def(
      "unique_id_round_trip",
      [](std::tuple<uint32_t, uint16_t, uint64_t> root) {
        const ncclUniqueId id = jax_mscclpp::nccl::encode_unique_id({std::get<0>(root), std::get<1>(root),
                                                                      std::get<2>(root)});
        const auto back = jax_mscclpp::nccl::decode_unique_id(id);
        ncclUniqueId foreign = id;
        foreign.internal[0] ^= 1;
        return std::make_tuple(nb::bytes(id.internal, sizeof(id.internal)), back.has_value() && back->ipv4 == std::get<0>(root) &&
                                   back->port == std::get<1>(root) && back->nonce == std::get<2>(root),
                               jax_mscclpp::nccl::decode_unique_id(foreign).has_value());
      },
      "The id of a root as bytes, whether it decodes to the same root, and whether an id with another first byte "
      "(the real library's) is taken for ours.");
}

}  // namespace jax_mscclpp::cuda
