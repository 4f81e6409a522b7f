// The NCCL-API library's selection (nccl/runtime/selection.h over runtime/select: the rule matcher and the
// tuning-file reader the JAX path's module binds too), its routes, the rank's calls they make and group launches
// (routing.h), and its count of decoded operations (operation.h), for tests without a GPU: what the library holds of
// a tuning file and what it chooses and launches, by the library's own code.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "bindings.h"
#include "operation.h"
#include "routing.h"
#include "select/rules.h"
#include "select/tuning_file.h"
#include "selection.h"

namespace nb = nanobind;

namespace jax_mscclpp::cuda {
namespace {

jax_mscclpp::nccl::ApiFunction api_function(const std::string& name) {
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, function, parameters, arguments) \
  if (name == #function) return jax_mscclpp::nccl::ApiFunction::function;
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
  throw std::invalid_argument("not an NCCL function of the library: " + name);
}

const char* route_kind_name(jax_mscclpp::nccl::Route::Kind kind) {
  using jax_mscclpp::nccl::Route;
  switch (kind) {
    case Route::kForward: return "forward";
    case Route::kRefuse: return "refuse";
    case Route::kCollective: return "collective";
    case Route::kPointToPoint: return "point_to_point";
    case Route::kComposed: return "composed";
  }
  return "?";
}

}  // namespace

using Rule = std::tuple<int32_t, int64_t, int32_t>;  // (collective, max_bytes or -1, algorithm or -1 for lax)

void register_selection(nb::module_& m) {
  m.def(
      "nccl_parse_tuning_file",
      [](const std::string& text) {
        std::vector<jax_mscclpp::select::Rule> parsed;
        std::string error;
        if (!jax_mscclpp::select::parse_tuning_file(text, &parsed, &error)) throw std::invalid_argument(error);
        std::vector<std::string> skipped;
        std::vector<Rule> rules;
        for (const auto& r : jax_mscclpp::nccl::library_rules(parsed, &skipped))
          rules.emplace_back(r.collective, r.max_bytes, r.code);
        return std::make_tuple(rules, skipped);
      },
      nb::arg("text"), "The GPU rules of a tuning file's text and the rules skipped; ValueError for a bad file.");
  m.def(
      "nccl_select_algorithm",
      [](const std::vector<Rule>& tuned, int32_t collective, uint64_t nbytes, int world, bool nccl_can_run,
         bool shares_gpu) {
        std::vector<jax_mscclpp::select::Rule> rules;
        for (const auto& [c, max_bytes, algorithm] : tuned) {
          const char* name = jax_mscclpp::select::algorithm_name(algorithm);
          if (name == nullptr) throw std::invalid_argument("not an algorithm code: " + std::to_string(algorithm));
          rules.push_back(jax_mscclpp::select::make_rule(c, "gpu", max_bytes, name, 0));
        }
        return jax_mscclpp::nccl::select_algorithm(rules, collective, nbytes, world, nccl_can_run, shares_gpu);
      },
      nb::arg("tuned"), nb::arg("collective"), nb::arg("nbytes"), nb::arg("world"), nb::arg("nccl_can_run"),
      nb::arg("shares_gpu"),
      "The library's algorithm for a GPU call (codes.def; -1: NVIDIA's NCCL) under `tuned` rules, for ranks that "
      "share a GPU or not.");
  m.def(
      "nccl_topology_name",
      [](const std::string& device_kind, int devices, int processes) {
        return jax_mscclpp::select::topology_name("gpu", device_kind, devices, processes);
      },
      nb::arg("device_kind"), nb::arg("devices"), nb::arg("processes"),
      "The topology's name as the library spells it (runtime_communicator.cc).");
  m.def("nccl_tuning_file_path", &jax_mscclpp::select::tuning_file_path, nb::arg("topology"),
        "The file the library reads for `topology` under this process's environment; '' for none.");
  m.def(
      "nccl_tuned_rules",
      [](const std::string& topology) {
        std::vector<Rule> rules;
        for (const auto& r : jax_mscclpp::nccl::tuned_rules(topology))
          rules.emplace_back(r.collective, r.max_bytes, r.code);
        return rules;
      },
      nb::arg("topology"), "The rules the library holds for `topology` (read once per path and process).");
  m.def(
      "nccl_route",
      [](const std::string& function, size_t count, int dtype, int op, int peer, int root, int nranks,
         bool nccl_can_run, bool shares_gpu, const std::vector<std::tuple<int, int64_t>>& premulsums) {
        namespace n = jax_mscclpp::nccl;
        n::ReductionTable reductions;  // premulsums: (dtype, immediate factor bits) in creation order
        for (const auto& [made_dtype, bits] : premulsums)
          reductions.add({static_cast<ncclDataType_t>(made_dtype), nullptr, static_cast<uint64_t>(bits)});
        const std::vector<jax_mscclpp::select::Rule> no_tuning;
        const n::RouteContext context{nranks, nccl_can_run, shares_gpu, no_tuning, reductions};
        const n::Operation operation{api_function(function), nullptr, nullptr, count,
                                     static_cast<ncclDataType_t>(dtype), static_cast<ncclRedOp_t>(op), peer, root,
                                     nullptr};
        const n::Route r = n::route(context, operation);
        return std::make_tuple(std::string(route_kind_name(r.kind)), r.algorithm,
                               r.fold ? static_cast<int>(r.fold->element) : -1,
                               r.fold ? static_cast<int>(r.fold->op) : -1, static_cast<int>(r.refusal), r.reason);
      },
      nb::arg("function"), nb::arg("count"), nb::arg("dtype"), nb::arg("op"), nb::arg("peer"), nb::arg("root"),
      nb::arg("nranks"), nb::arg("nccl_can_run"), nb::arg("shares_gpu"), nb::arg("premulsums"),
      "The library's route of an operation (routing.h) under the built-in table: (kind, algorithm, fold element, "
      "fold op, refusal code, reason).");
  m.def(
      "nccl_rank_call",
      [](const std::string& function, size_t count, int dtype, int op, int peer, int root, int nranks, int rank,
         bool shares_gpu, uintptr_t send, uintptr_t recv, int32_t max_blocks) {
        namespace n = jax_mscclpp::nccl;
        const n::ReductionTable reductions;
        const std::vector<jax_mscclpp::select::Rule> no_tuning;
        const n::RouteContext context{nranks, !shares_gpu, shares_gpu, no_tuning, reductions};
        const n::Operation operation{api_function(function), reinterpret_cast<const void*>(send),
                                     reinterpret_cast<void*>(recv), count, static_cast<ncclDataType_t>(dtype),
                                     static_cast<ncclRedOp_t>(op), peer, root, nullptr};
        const n::Windows no_windows;
        // As the library's submit and launch do: the route (the one decoding), then the rank's call.
        const n::Route r = n::route(context, operation);
        nb::dict out;
        out["route"] = route_kind_name(r.kind);
        out["block_bytes"] = r.decoded.block_bytes;
        if (r.kind == n::Route::kCollective) {
          const Call call = n::collective_call(r, operation, {rank, nranks, max_blocks, no_windows});
          if (const auto* c = std::get_if<CollectiveCall>(&call)) {
            out["call"] = "collective";
            out["collective"] = c->collective;
            out["algorithm"] = c->algorithm;
            out["in"] = reinterpret_cast<uintptr_t>(c->in);
            out["out"] = reinterpret_cast<uintptr_t>(c->out);
            out["block_count"] = c->block_count;
            out["dtype"] = c->dtype;
            out["op"] = c->op;
            out["max_blocks"] = c->max_blocks;
            out["plan_id"] = c->plan_id;
            out["peers_reach_buffers"] = c->peers_reach_buffers;
          } else {
            out["call"] = "in_place";
          }
        } else if (r.kind == n::Route::kPointToPoint) {
          const P2PMessage message = n::point_to_point_message(r, operation);
          out["call"] = "point_to_point";
          out["buffer"] = reinterpret_cast<uintptr_t>(message.buffer);
          out["bytes"] = message.bytes;
          out["peer"] = message.peer;
          out["receive"] = static_cast<int>(message.receive);
        }
        return out;
      },
      nb::arg("function"), nb::arg("count"), nb::arg("dtype"), nb::arg("op"), nb::arg("peer"), nb::arg("root"),
      nb::arg("nranks"), nb::arg("rank"), nb::arg("shares_gpu"), nb::arg("send"), nb::arg("recv"),
      nb::arg("max_blocks"),
      "The library's route of an operation and the rank's call it makes (routing.h: collective_call, "
      "point_to_point_message) under the built-in table, on a communicator without windows (NVIDIA's NCCL serving it "
      "unless shares_gpu): a dict of the route, the decoded block bytes and the call's fields.");
  m.def("nccl_operations_decoded", &jax_mscclpp::nccl::operations_decoded,
        "How many operations the library's code in this module decoded (operation.h): one per route.");
  m.def(
      "nccl_plan_group",
      [](const std::vector<std::pair<int, bool>>& queue) {
        std::vector<std::pair<const void*, bool>> shape;
        for (const auto& [communicator, p2p] : queue)
          shape.emplace_back(reinterpret_cast<const void*>(static_cast<uintptr_t>(communicator + 1)), p2p);
        std::vector<std::pair<bool, std::vector<size_t>>> out;
        for (const auto& launch : jax_mscclpp::nccl::plan_group(shape))
          out.emplace_back(launch.point_to_point, launch.operations);
        return out;
      },
      nb::arg("queue"), "The launches of a group (routing.h, plan_group): queue entries are (communicator, p2p).");
}

}  // namespace jax_mscclpp::cuda
