#include "rank_identity.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>
#include <utility>

#include "byte_frame.h"

namespace jax_mscclpp::nccl {

std::string encode_identity(const RankIdentity& identity) {
  FrameWriter out;
  out.text(identity.host).i64(identity.process).text(identity.gpu_uuid).text(identity.gpu_name);
  out.text(identity.runtime_refusal).text(identity.real_refusal).text(encode_agreement(identity.agreement));
  return out.bytes();
}

RankIdentity decode_identity(const std::string& bytes, int rank) {
  RankIdentity identity;
  FrameReader in(bytes);
  std::string agreement;
  if (!in.text(&identity.host) || !in.i64(&identity.process) || !in.text(&identity.gpu_uuid) ||
      !in.text(&identity.gpu_name) || !in.text(&identity.runtime_refusal) ||
      !in.text(&identity.real_refusal) || !in.text(&agreement) || !in.at_end() ||
      !decode_agreement(agreement, &identity.agreement)) {
    throw std::runtime_error("rank " + std::to_string(rank) +
                             " sent no identity jax_mscclpp's libnccl.so.2 reads (a different library version?)");
  }
  return identity;
}

std::string this_host_identity() {
  if (const char* forced = std::getenv("NCCL_HOSTID"); forced != nullptr && forced[0] != '\0') return forced;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return std::string(name) + boot_id;
}

Backend choose_backend(const std::vector<RankIdentity>& ranks) {
  Backend backend;
  std::vector<Agreement> agreements;
  for (const RankIdentity& r : ranks) agreements.push_back(r.agreement);
  backend.disagreement = agreement_difference(agreements);
  backend.agreed = backend.disagreement.empty();
  std::set<std::pair<std::string, int64_t>> processes;
  for (const RankIdentity& r : ranks) processes.insert({r.host, r.process});
  backend.processes = static_cast<int>(processes.size());
  for (size_t q = 0; q < ranks.size() && backend.real_refusal.empty(); ++q)
    if (!ranks[q].real_refusal.empty()) backend.real_refusal = "rank " + std::to_string(q) + ": " + ranks[q].real_refusal;
  for (size_t q = 1; q < ranks.size(); ++q) {
    if (ranks[q].host != ranks[0].host) {
      backend.reason = "ranks 0 and " + std::to_string(q) +
                       " are on different hosts (jax_mscclpp's runtime runs communicators within one host)";
      return backend;
    }
  }
  for (size_t q = 0; q < ranks.size(); ++q) {
    if (!ranks[q].runtime_refusal.empty()) {
      backend.reason = "rank " + std::to_string(q) + ": " + ranks[q].runtime_refusal;
      return backend;
    }
  }
  backend.ours = true;
  for (size_t q = 0; q < ranks.size(); ++q)
    for (size_t p = q + 1; p < ranks.size(); ++p)
      if (ranks[q].gpu_uuid == ranks[p].gpu_uuid) backend.shares_gpu = true;
  backend.reason = backend.shares_gpu ? "one host, ranks sharing a GPU" : "one host";
  return backend;
}

}  // namespace jax_mscclpp::nccl
