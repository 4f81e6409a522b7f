// The NCCL-API library's rendezvous (nccl/runtime/bootstrap.h), the process's mailbox (mailbox.h) and unique id,
// for tests without a GPU: a root, its clients as ranks, rounds of all-gather, letters, and the id's round trip; the identities its ranks exchange at setup and
// what they must agree on (nccl/runtime/rank_identity.h, agreement.h), and the decision every rank takes from them;
// the library's timeout policy and its late-wait warning (nccl/runtime/timeout_policy.h).
#include <nanobind/stl/string.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "agreement.h"
#include "bindings.h"
#include "bootstrap.h"
#include "mailbox.h"
#include "rank_context.h"
#include "rank_identity.h"
#include "runtime_config.h"
#include "timeout_policy.h"
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
          nb::arg("mine"))
      .def("report_failure", &BootstrapClient::report_failure, nb::arg("reason"),
           nb::call_guard<nb::gil_scoped_release>());
  m.def(
      "process_mailbox",
      [] {
        const jax_mscclpp::nccl::MailboxAddress a = jax_mscclpp::nccl::process_mailbox();
        return std::make_tuple(a.ipv4, a.port);
      },
      "This process's mailbox (nccl/runtime/mailbox.h): (ipv4, port), in network byte order.");
  m.def(
      "mailbox_deliver",
      [](std::tuple<uint32_t, uint16_t> to, const std::string& key, nb::bytes letter, double limit_s) {
        const std::string bytes(static_cast<const char*>(letter.data()), letter.size());
        nb::gil_scoped_release release;
        jax_mscclpp::nccl::deliver({std::get<0>(to), std::get<1>(to)}, key, bytes, limit_s);
      },
      nb::arg("to"), nb::arg("key"), nb::arg("letter"), nb::arg("limit_s"));
  m.def(
      "mailbox_collect",
      [](const std::string& key, double limit_s) {
        std::string letter;
        {
          nb::gil_scoped_release release;
          letter = jax_mscclpp::nccl::collect(key, limit_s, "the letter '" + key + "'");
        }
        return nb::bytes(letter.data(), letter.size());
      },
      nb::arg("key"), nb::arg("limit_s"));
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

  using Fields = std::vector<std::pair<std::string, std::string>>;
  auto to_agreement = [](const Fields& fields) {
    jax_mscclpp::nccl::Agreement a;
    for (const auto& [name, value] : fields) a.push_back({name, value});
    return a;
  };
  m.def(
      "agreement_difference",
      [to_agreement](const std::vector<Fields>& ranks) {
        std::vector<jax_mscclpp::nccl::Agreement> all;
        for (const Fields& r : ranks) all.push_back(to_agreement(r));
        return jax_mscclpp::nccl::agreement_difference(all);
      },
      "agreement_difference of each rank's [(name, value)] fields: '' when all agree.");
  m.def(
      "choose_backend",
      [to_agreement](const std::vector<std::tuple<std::string, int64_t, nb::bytes, std::string, std::string, Fields>>&
                         ranks) {
        // Each rank's identity goes through its frame's bytes and back, as setup sends it.
        std::vector<jax_mscclpp::nccl::RankIdentity> identities;
        for (size_t q = 0; q < ranks.size(); ++q) {
          const auto& [host, process, uuid, runtime_refusal, real_refusal, fields] = ranks[q];
          jax_mscclpp::nccl::RankIdentity r;
          r.host = host;
          r.process = process;
          r.gpu_uuid.assign(uuid.c_str(), uuid.size());
          r.gpu_name = uuid.size() > 0 ? "NVIDIA H200" : "";
          r.runtime_refusal = runtime_refusal;
          r.real_refusal = real_refusal;
          r.agreement = to_agreement(fields);
          identities.push_back(
              jax_mscclpp::nccl::decode_identity(jax_mscclpp::nccl::encode_identity(r), static_cast<int>(q)));
        }
        const jax_mscclpp::nccl::Backend b = jax_mscclpp::nccl::choose_backend(identities);
        return std::make_tuple(b.agreed, b.disagreement, b.ours, b.reason, b.shares_gpu, b.processes, b.real_refusal);
      },
      "choose_backend over ranks given as (host, process, gpu uuid bytes, runtime refusal, real refusal, fields): "
      "(agreed, disagreement, ours, reason, shares_gpu, processes, real_refusal).");
  m.def(
      "decode_identity",
      [](nb::bytes frame, int rank) {
        return jax_mscclpp::nccl::decode_identity(std::string(frame.c_str(), frame.size()), rank).host;
      },
      "The host of an identity frame; RuntimeError naming the rank for bytes that are not one.");
  m.def("this_host_identity", &jax_mscclpp::this_host_identity,
        "NCCL_HOSTID where set, else the host name and the boot id.");
  m.def("this_process_identity", &jax_mscclpp::this_process_identity,
        "This process among its host's: its id and its PID namespace, hashed.");
  m.def(
      "nccl_timeout_policy",
      [] {
        const TimeoutPolicy policy = jax_mscclpp::nccl::library_timeout_policy();
        return std::make_tuple(std::string(jax_mscclpp::nccl::timeout_policy_name(policy)),
                               static_cast<uint32_t>(policy));
      },
      "(name, the word RuntimeConfig::on_timeout gets) of the policy the library's ranks take from this process's "
      "environment (JAX_MSCCLPP_NCCL_ON_TIMEOUT, JAX_MSCCLPP_TIMEOUT_S).");
  m.def(
      "timeout_policies",
      [] {
        return std::make_tuple(static_cast<uint32_t>(TimeoutPolicy::kFail),
                               static_cast<uint32_t>(TimeoutPolicy::kWait),
                               static_cast<uint32_t>(RankOptions{}.on_timeout));
      },
      "(kFail, kWait, the policy of RankOptions by default: the JAX path's) as the words of TimeoutPolicy.");
  m.def(
      "late_wait_warning",
      [](int rank, int peer, uint32_t op, uint64_t epoch, uint64_t observed, double waited_s, double timeout_s) {
        const ErrorRecord rec =
            wait_record_of(op, rank, peer, epoch, observed, static_cast<uint64_t>(waited_s * 1e9));
        return jax_mscclpp::nccl::late_wait_warning(describe_late(rec, static_cast<uint64_t>(timeout_s * 1e9)));
      },
      nb::arg("rank"), nb::arg("peer"), nb::arg("op"), nb::arg("epoch"), nb::arg("observed"), nb::arg("waited_s"),
      nb::arg("timeout_s"),
      "The line the library prints for a late report with these fields (WaitOp `op`; no calls posted).");
}

}  // namespace jax_mscclpp::cuda
