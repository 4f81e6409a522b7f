// One setup of GPU ranks for both frontends (docs/architecture.md, "One setup"): the JAX path (ffi/cuda/
// communicator_bindings.cc, over JAX's key-value store) and the NCCL library (nccl/runtime/runtime_communicator.cc,
// over its bootstrap) make their ranks, then call connect_all, which does the rest alike:
//   1. every local rank publishes one frame: its identity (gpu_identity.h), the frontend's agreement bytes and its
//      endpoint (RankContext::endpoint: scratch, semaphores, proxy);
//   2. it fetches the frame of every other rank of its group (Exchange::fetch waits at most the timeout and names
//      the rank that did not publish);
//   3. the frontend's check sees every rank's agreement bytes and throws to fail the setup (the NCCL library's
//      ranks compare their tuning rules there; agreement.h);
//   4. it says whether two ranks drive one physical GPU (gpu_identity.h, share_a_gpu over the identities);
//   5. it maps every peer's endpoint (GpuRank::connect) and builds the channels (GpuRank::finalize), placed as 4
//      says (codes.def: kSharedGpu or kOwnGpu, which the kernels' protocol rows read).
// Every local rank publishes before any fetches, so a process holding several ranks of one group never waits for
// itself.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "communicator.h"
#include "gpu_identity.h"

namespace jax_mscclpp::cuda {

// This process's identity on CUDA device `device`: no GPU fields where the device cannot be queried (`error`, where
// not null, then says why).
GpuIdentity local_gpu_identity(int device, cudaError_t* error = nullptr);

// The frontend's meeting place of one communicator's setup.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // Makes rank `rank`'s frame (a rank of this process) readable by every rank.
  virtual void publish(int rank, const std::string& frame) = 0;
  // Rank `rank`'s frame, waiting for it at most the timeout (JAX_MSCCLPP_TIMEOUT_S); throws naming the rank.
  virtual std::string fetch(int rank) = 0;
};

// A rank of this process and the ranks of its group (its own index included), in communicator ranks.
struct LocalRank {
  GpuRank* rank;
  int index;
  std::vector<int> group;
};

struct ConnectedRanks {
  bool shares_gpu = false;                    // share_a_gpu over every rank met (the local ones included)
  std::map<int, GpuIdentity> identities;      // by rank: every rank met
};

// The frontend's comparison of what its ranks must agree on: every met rank's agreement bytes, by rank. Throws to
// fail the setup on every rank alike (each sees the same frames).
using AgreementCheck = std::function<void(const std::map<int, std::string>& agreements)>;

// Steps 1-5 above for `local` (each made on its device, not yet connected). Throws what the exchange or the check
// throws, or std::runtime_error naming a rank whose frame is not one.
ConnectedRanks connect_all(const std::vector<LocalRank>& local, Exchange& exchange,
                           const std::string& agreement = {}, const AgreementCheck& check = {});

}  // namespace jax_mscclpp::cuda
