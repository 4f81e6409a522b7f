// jax_mscclpp._jax_mscclpp.select: the one rule matcher and tuning-file reader (runtime/select), for the JAX path's
// selection (jax_mscclpp/selection.py, selection_table.py, tuning_file.py). Every build has it (the CPU-only one
// too): the Python selection runs without a GPU.
//
// A rule crosses as (collective code, platform, max_bytes or None for no bound, algorithm name, world or None for
// any), Python's selection_table.Rule.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "select/rules.h"
#include "select/tuning_file.h"

namespace nb = nanobind;

namespace jax_mscclpp {
namespace {

using PyRule = std::tuple<int32_t, std::string, std::optional<int64_t>, std::string, std::optional<int>>;

PyRule to_python(const select::Rule& r) {
  return {r.collective, r.platform, r.max_bytes < 0 ? std::nullopt : std::optional<int64_t>(r.max_bytes),
          r.algorithm, r.world == 0 ? std::nullopt : std::optional<int>(r.world)};
}

std::vector<PyRule> to_python(const std::vector<select::Rule>& rules) {
  std::vector<PyRule> out;
  out.reserve(rules.size());
  for (const select::Rule& r : rules) out.push_back(to_python(r));
  return out;
}

select::Rule from_python(nb::handle rule) {
  auto [collective, platform, max_bytes, algorithm, world] = nb::cast<PyRule>(rule);
  return select::make_rule(collective, std::move(platform), max_bytes.value_or(-1), std::move(algorithm),
                           world.value_or(0));
}

const char* name_or_throw(int32_t algorithm) {
  const char* name = select::algorithm_name(algorithm);
  if (name == nullptr) throw nb::value_error("not an algorithm of codes.def");
  return name;
}

}  // namespace

void register_select_bindings(nb::module_& m) {
  nb::module_ s = m.def_submodule("select", "The rule matcher and the tuning-file reader (runtime/select).");
  s.attr("TUNING_FORMAT") = select::kTuningFormat;

  s.def(
      "builtin_rules", [] { return to_python(select::builtin_rules()); },
      "selection.def's rules, in file order: [(collective, platform, max_bytes, algorithm, world)].");
  s.def(
      "protocol_rules",
      [] {
        std::vector<std::tuple<std::string, int32_t, int32_t, int32_t, uint64_t, std::string, std::string>> out;
        for (const collectives::ProtocolRow& p : select::protocol_rules())
          out.emplace_back(name_or_throw(p.algorithm), p.collective, p.placement, p.world, p.ll_max_block_bytes,
                           name_or_throw(p.ll), name_or_throw(p.hb));
        return out;
      },
      "selection.def's protocol rows, in file order: [(algorithm, collective code or -1 for every one, placement "
      "code (codes.def), world or 0 for any, largest LL block in bytes, LL algorithm, HB algorithm)].");
  s.def(
      "in_place_rules",
      [] {
        std::vector<std::tuple<int32_t, uint64_t>> out;
        for (const collectives::InPlaceRow& row : select::in_place_rules())
          out.emplace_back(row.world, row.min_rank_bytes);
        return out;
      },
      "selection.def's in-place rows, in file order: [(world or 0 for any, fewest bytes a rank's buffer holds for a "
      "streaming call between ranks of one process to run in place)].");
  s.def(
      "protocol_of",
      [](const std::string& algorithm, const std::string& platform, uint64_t block_bytes, int32_t collective,
         int32_t world, int32_t placement) -> std::optional<std::string> {
        const std::optional<int32_t> runs_as = select::protocol_of(select::algorithm_code(algorithm), platform,
                                                                   {collective, block_bytes, world, placement});
        if (!runs_as) return std::nullopt;
        return std::string(name_or_throw(*runs_as));
      },
      nb::arg("algorithm"), nb::arg("platform"), nb::arg("block_bytes"), nb::arg("collective"), nb::arg("world"),
      nb::arg("placement"),
      "The algorithm `algorithm` runs as on `platform` for a call of `collective` with blocks of `block_bytes` on "
      "`world` ranks placed as `placement` (codes.def), or None where it is its own.");
  s.def(
      "choose",
      [](nb::iterable tuned, int32_t collective, const std::string& platform, uint64_t nbytes,
         std::optional<int> world, bool lax_runs, bool shares_gpu) {
        std::vector<select::Rule> rules;
        for (nb::handle rule : tuned) rules.push_back(from_python(rule));
        return std::string(
            select::choose(rules, collective, platform, nbytes, world.value_or(0), lax_runs, shares_gpu).algorithm);
      },
      nb::arg("tuned"), nb::arg("collective"), nb::arg("platform"), nb::arg("nbytes"), nb::arg("world").none(),
      nb::arg("lax_runs"), nb::arg("shares_gpu") = false,
      "The algorithm of a call (rules.h, choose): the first matching `tuned` rule; on GPUs of ranks that share one "
      "(`shares_gpu`) the shared-GPU rows; then the built-in table's first matching rule. A 'lax' rule decides "
      "nothing unless `lax_runs`; without a deciding rule, 'lax' where it runs, else the shared-GPU rows' "
      "algorithm where the platform runs it. `world` None: any.");
  s.def(
      "missing_need",
      [](const std::string& algorithm, int world, bool port_channels) -> std::optional<std::string> {
        const char* missing =
            select::missing_need(select::algorithm_code(algorithm), select::gpu_channels(world, port_channels));
        if (missing == nullptr) return std::nullopt;
        return std::string(missing);
      },
      nb::arg("algorithm"), nb::arg("world"), nb::arg("port_channels"),
      "What `algorithm` needs (codes.def's `needs`) that a GPU communicator of `world` ranks, made with port "
      "channels or not, lacks: None for nothing, else 'port channels' or 'a SwitchChannel' (rules.h, missing_need).");
  s.def(
      "parse_tuning_file",
      [](const std::string& text, const std::map<std::string, std::map<int32_t, std::vector<std::string>>>& runs) {
        std::vector<select::Rule> rules;
        std::string error;
        if (!select::parse_tuning_file(text, &rules, &error)) throw nb::value_error(error.c_str());
        std::set<std::tuple<std::string, int32_t, std::string>> runnable;
        for (const auto& [platform, by_collective] : runs)
          for (const auto& [collective, names] : by_collective)
            for (const std::string& name : names) runnable.emplace(platform, collective, name);
        std::vector<select::Rule> kept, skipped;
        select::split_runnable(
            rules, [&](const select::Rule& r) { return runnable.count({r.platform, r.collective, r.algorithm}) > 0; },
            &kept, &skipped);
        return std::make_pair(to_python(kept), to_python(skipped));
      },
      nb::arg("text"), nb::arg("runs"),
      "A tuning file's rules, in file order, split into (kept, skipped): kept those that say 'lax' or name an "
      "algorithm `runs` ({platform: {collective: [algorithm names]}}) lists. ValueError for text that is not JSON "
      "or not of the format.");
  s.def(
      "topology_name",
      [](const std::string& platform, const std::string& device_kind, int devices, int processes) {
        return select::topology_name(platform, device_kind, devices, processes);
      },
      nb::arg("platform"), nb::arg("device_kind"), nb::arg("devices"), nb::arg("processes"),
      "'<platform>-<device kind>-<n>dev' ('-<p>proc' after it with several processes).");
  s.def("named_tuning_file", &select::named_tuning_file,
        "JAX_MSCCLPP_TUNING_FILE: None where unset or empty (the topology's default file), '' where it says off, "
        "else the path.");
  s.def("cache_dir", &select::cache_dir, "The cache directory of the tuning files; '' where there is none.");
  s.def("default_tuning_file", &select::default_tuning_file, nb::arg("topology"),
        "The default tuning file of `topology` (which need not exist); '' where there is no cache directory.");
}

}  // namespace jax_mscclpp
