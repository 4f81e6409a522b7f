// The NCCL-API library's selection (nccl/runtime/selection_table.h) and its tuning-file reader (tuning_file.h), for
// tests without a GPU: the same table and file formats as the JAX path, read by the library's own code.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "selection_table.h"
#include "tuning_file.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {

using Rule = std::tuple<int32_t, int64_t, int32_t>;  // (collective, max_bytes or -1, algorithm or -1 for lax)

void register_selection(nb::module_& m) {
  m.def(
      "nccl_parse_tuning_file",
      [](const std::string& text) {
        jax_mscclpp::nccl::TuningFile parsed;
        std::string error;
        if (!jax_mscclpp::nccl::parse_tuning_file(text, &parsed, &error)) throw std::invalid_argument(error);
        std::vector<Rule> rules;
        for (const auto& r : parsed.rules) rules.emplace_back(r.collective, r.max_bytes, r.algorithm);
        return std::make_tuple(rules, parsed.skipped);
      },
      nb::arg("text"), "The GPU rules of a tuning file's text and the rules skipped; ValueError for a bad file.");
  m.def(
      "nccl_select_algorithm",
      [](const std::vector<Rule>& tuned, int32_t collective, uint64_t nbytes, int world, bool nccl_can_run) {
        std::vector<jax_mscclpp::nccl::TunedRule> rules;
        for (const auto& [c, max_bytes, algorithm] : tuned) rules.push_back({c, max_bytes, algorithm});
        return jax_mscclpp::nccl::select_algorithm(rules, collective, nbytes, world, nccl_can_run);
      },
      nb::arg("tuned"), nb::arg("collective"), nb::arg("nbytes"), nb::arg("world"), nb::arg("nccl_can_run"),
      "The library's algorithm for a GPU call (codes.def; -1: NVIDIA's NCCL) under `tuned` rules.");
  m.def("nccl_topology_name", &jax_mscclpp::nccl::topology_name, nb::arg("device_kind"), nb::arg("devices"),
        nb::arg("processes"), "The topology's name as the library spells it.");
  m.def("nccl_tuning_file_path", &jax_mscclpp::nccl::tuning_file_path, nb::arg("topology"),
        "The file the library reads for `topology` under this process's environment; '' for none.");
  m.def(
      "nccl_tuned_rules",
      [](const std::string& topology) {
        std::vector<Rule> rules;
        for (const auto& r : jax_mscclpp::nccl::tuned_rules(topology))
          rules.emplace_back(r.collective, r.max_bytes, r.algorithm);
        return rules;
      },
      nb::arg("topology"), "The rules the library holds for `topology` (read once per path and process).");
}

}  // namespace jax_mscclpp::cuda
