#include "rank_identity.h"

#include <set>
#include <stdexcept>
#include <utility>

#include "byte_frame.h"
#include "gpu_identity.h"

namespace jax_mscclpp::nccl {

std::string encode_identity(const RankIdentity& identity) {
  FrameWriter out;
  write_gpu_identity(out, identity);
  out.text(identity.runtime_refusal).text(identity.real_refusal).text(encode_agreement(identity.agreement));
  return out.bytes();
}

RankIdentity decode_identity(const std::string& bytes, int rank) {
  RankIdentity identity;
  FrameReader in(bytes);
  std::string agreement;
  if (!read_gpu_identity(in, &identity) || !in.text(&identity.runtime_refusal) ||
      !in.text(&identity.real_refusal) || !in.text(&agreement) || !in.at_end() ||
      !decode_agreement(agreement, &identity.agreement)) {
    throw std::runtime_error("rank " + std::to_string(rank) +
                             " sent no identity jax_mscclpp's libnccl.so.2 reads (a different library version?)");
  }
  return identity;
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
  backend.shares_gpu = share_a_gpu(std::vector<GpuIdentity>(ranks.begin(), ranks.end()));
  backend.reason = backend.shares_gpu ? "one host, ranks sharing a GPU" : "one host";
  return backend;
}

}  // namespace jax_mscclpp::nccl
