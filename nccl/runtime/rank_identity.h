// What each rank tells the others in the first round of a communicator's setup (bootstrap.h), and the decision
// every rank takes from the same frames, so that all take the same one: whether the communicator is our runtime's
// or NVIDIA's.
//
// The identity: the host (NCCL's host identity: NCCL_HOSTID where set, as NVIDIA's NCCL reads it, else the host
// name and the kernel's boot id), the process, the GPU's UUID (none where the rank has no usable GPU), why our
// runtime cannot run this rank ("" when it can: the runtime is on and the GPU usable), and the rank's agreement
// fields (agreement.h); and whether NVIDIA's library opened in its process (where one rank's did not, no real
// communicator is made on any: NVIDIA's communicator then fails on every rank, and none runs beside ours).
//
// The decision (choose_backend), in order:
//   1. the agreement fields differ between ranks: setup fails on every rank (ncclInvalidUsage) with the
//      difference's text;
//   2. the ranks span hosts, or our runtime cannot run some rank: NVIDIA's, with the reason;
//   3. else ours; `shares_gpu` when two ranks drive one GPU (NVIDIA's NCCL refuses them, so none runs beside ours).
// NCCL_HOSTID is what tests use to put two processes of one machine on different hosts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agreement.h"

namespace jax_mscclpp::nccl {

struct RankIdentity {
  std::string host;
  int64_t process = 0;
  std::string gpu_uuid;          // 16 bytes, "" without a GPU
  std::string gpu_name;          // the device's name (its tuning-file topology), "" without a GPU
  std::string runtime_refusal;   // why our runtime cannot run this rank, "" when it can
  std::string real_refusal;      // why NVIDIA's library did not open in this process, "" when it did
  Agreement agreement;
};

std::string encode_identity(const RankIdentity& identity);
// Throws std::runtime_error naming `rank` when `bytes` are not an identity.
RankIdentity decode_identity(const std::string& bytes, int rank);

// NCCL_HOSTID where set, else the host name followed by /proc/sys/kernel/random/boot_id (NVIDIA's NCCL's rule).
std::string this_host_identity();

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
