// What each rank tells the others in the first round of a communicator's setup (bootstrap.h), and the decision
// every rank takes from the same frames, so that all take the same one: whether the communicator is our runtime's
// or NVIDIA's.
//
// The identity: the host (gpu_identity.h, this_host_identity), the process, the GPU's UUID (none where the rank has
// no usable GPU), why our
// runtime cannot run this rank ("" when it can: the runtime is on and the GPU usable), and the rank's agreement
// fields (agreement.h); and whether NVIDIA's library opened in its process (where one rank's did not, no real
// communicator is made on any: NVIDIA's communicator then fails on every rank, and none runs beside ours).
//
// The decision (choose_backend), in order:
//   1. the agreement fields differ between ranks: setup fails on every rank (ncclInvalidUsage) with the
//      difference's text;
//   2. the ranks span hosts, or our runtime cannot run some rank: NVIDIA's, with the reason;
//   3. else ours; `shares_gpu` when two ranks drive one GPU (gpu_identity.h, share_a_gpu: NVIDIA's NCCL refuses
//      them, so none runs beside ours).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agreement.h"
#include "gpu_identity.h"

namespace jax_mscclpp::nccl {

// The host, process and GPU (gpu_identity.h; the GPU's name is its tuning-file topology), then this library's.
struct RankIdentity : GpuIdentity {
  std::string runtime_refusal;   // why our runtime cannot run this rank, "" when it can
  std::string real_refusal;      // why NVIDIA's library did not open in this process, "" when it did
  Agreement agreement;
};

std::string encode_identity(const RankIdentity& identity);
// Throws std::runtime_error naming `rank` when `bytes` are not an identity.
RankIdentity decode_identity(const std::string& bytes, int rank);

struct Backend {
  bool agreed = true;
  std::string disagreement;  // when !agreed: agreement_difference's text
  bool ours = false;
  std::string reason;        // why ours, or why NVIDIA's: "ranks 0 and 2 are on different hosts", "rank 1: ..."
  bool shares_gpu = false;
  int processes = 0;         // distinct (host, process) pairs
  std::string real_refusal;  // "rank R: why" for the first rank whose NVIDIA library did not open, else ""
};

Backend choose_backend(const std::vector<RankIdentity>& ranks);

}  // namespace jax_mscclpp::nccl
