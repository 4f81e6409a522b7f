// Our runtime's side of a communicator made through this library: one GPU rank (runtime/gpu/communicator.h) on the
// calling thread's current device, set up by meeting the other ranks through the bootstrap root of our unique id,
// and the NCCL operations it runs with the collective kernels (kernels/collectives/collective.h).
//
// Contracts:
//   - Setup is collective: every rank constructs its RuntimeCommunicator with the same root and world size; a rank
//     missing for the timeout (JAX_MSCCLPP_TIMEOUT_S) fails every rank's setup with an error naming it.
//   - shares_gpu(): two ranks drive one physical GPU (processes sharing a device), where NVIDIA's NCCL refuses to
//     run; then every operation we have a kernel for runs here at any size.
//   - algorithm_for(): the algorithm of ours that runs an operation, from the selection table shared with the JAX
//     path (selection_table.h) beneath the tuning file of the topology the communicator spans (tuning_file.h),
//     or -1 when the real NCCL should (an operation, dtype or reduction we do not run, or
//     a size the table gives to NCCL while NCCL can run).
//   - launch() / launch_permute(): enqueue on the operation's stream, capture-safe (no host state per call); every
//     rank must launch the same sequence (kernels/collectives/collective.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "communicator.h"
#include "our_runtime.h"
#include "tuning_file.h"

namespace jax_mscclpp::nccl {

// What launch() and launch_permute() return for an operation on a communicator whose kernel failed and stopped.
constexpr cudaError_t kRefusedAfterFailure = cudaErrorNotPermitted;

class RuntimeCommunicator {
 public:
  RuntimeCommunicator(const BootstrapAddress& root, int rank, int nranks);
  ~RuntimeCommunicator();

  int rank() const { return bootstrap_.rank(); }
  int nranks() const { return bootstrap_.nranks(); }
  int device() const { return device_; }
  bool shares_gpu() const { return shares_gpu_; }
  BootstrapClient& bootstrap() { return bootstrap_; }

  // `nccl_can_run`: whether the real NCCL holds a communicator for these ranks.
  int32_t algorithm_for(const Operation& op, bool nccl_can_run) const;
  // A collective (not send / recv). cudaErrorInvalidValue for arguments our kernels refuse.
  cudaError_t launch(const Operation& op, int32_t algorithm) const;
  // One send and / or one receive of this rank (either may be null), as one permutation call of every rank.
  cudaError_t launch_permute(const Operation* send, const Operation* recv, int32_t algorithm) const;
  // The record of this rank's kernel that failed and stopped (error_record.cuh), "" when none did. launch() and
  // launch_permute() then refuse every operation: kRefusedAfterFailure.
  std::string failure() const;

 private:
  BootstrapClient bootstrap_;
  int device_ = 0;
  bool shares_gpu_ = false;
  const std::vector<TunedRule>* tuned_ = nullptr;
  std::unique_ptr<cuda::GpuRank> rank_;
};

}  // namespace jax_mscclpp::nccl
