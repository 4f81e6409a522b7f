// Our runtime's side of a communicator made through this library: one GPU rank (runtime/gpu/communicator.h) on the
// calling thread's current device, set up by meeting the other ranks through the bootstrap root of our unique id,
// and the NCCL operations it runs with the collective kernels (kernels/collectives/collective.h).
//
// Contracts:
//   - Setup is collective, after the identity round (rank_identity.h) chose our runtime: every rank constructs its
//     RuntimeCommunicator over its bootstrap client with the same identities, and its rank meets the others through
//     the runtime's one setup (runtime/gpu/rank_setup.h, connect_all, over the bootstrap); the endpoint round
//     carries the tuning file's rules in force (agreement.h), and a difference throws Disagreement on every rank; a
//     rank missing for the timeout (JAX_MSCCLPP_TIMEOUT_S) fails every rank's setup with an error naming it.
//   - stop_kernels(): makes an abort visible to the device without waiting for any stream: the rank's waits stop
//     instead of trapping, and its failed and recorded words are set (call_inbox.cuh), so every SpinBound of its
//     kernels, running or queued, gives up at its next check and no record is written. kernels_stopped(): the
//     words have reached the device (the kernels give up from then on).
//   - shares_gpu(): two ranks drive one physical GPU (processes sharing a device), where NVIDIA's NCCL refuses to
//     run; then every operation we have a kernel for runs here at any size.
//   - The launches enqueue on the operation's stream, capture-safe (no host state per call). A collective kernel
//     needs every rank to launch the same sequence (kernels/collectives/collective.h); point-to-point messages only
//     the two ranks of each (launch_p2p_group). Which of them runs an operation is operations.cc's decision.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agreement.h"
#include "bootstrap.h"
#include "call.h"
#include "communicator.h"
#include "our_runtime.h"
#include "rank_identity.h"
#include "reduction_table.h"
#include "select/rules.h"
#include "windows.h"

namespace jax_mscclpp::nccl {

class RuntimeCommunicator {
 public:
  RuntimeCommunicator(std::unique_ptr<BootstrapClient> bootstrap, const std::vector<RankIdentity>& identities,
                      const Backend& backend);
  ~RuntimeCommunicator();

  int rank() const { return bootstrap_->rank(); }
  int nranks() const { return bootstrap_->nranks(); }
  int device() const { return device_; }
  bool shares_gpu() const { return shares_gpu_; }
  BootstrapClient& bootstrap() { return *bootstrap_; }
  void stop_kernels();
  bool kernels_stopped() const;

  // ---- what the operations (operations.cc, compositions.cc) run on this rank ----
  // The tuning file's rules of the topology the communicator spans (selection.h, tuned_rules), beneath which the
  // built-in selection table decides (runtime/select).
  const std::vector<select::Rule>& tuned_rules() const { return *tuned_; }
  // The operation decoded into a call of the rank's one call entry (runtime/gpu/call.h, GpuRank::run: refused
  // after a failed kernel, else launched, its outputs poisoned where failing kernels stop).
  // A collective kernel (collective.h: all-reduce, all-gather, reduce-scatter, all-to-all) of every rank; a
  // launch failure with cudaErrorInvalidValue for arguments our kernels refuse.
  cuda::CallResult launch(const Operation& op, int32_t algorithm) const;
  // codes::kInPlace where the operation's buffers lie in windows of every rank (windows.h) and launch_in_place runs
  // it; else `selected`, the table's algorithm. launch() with kInPlace runs it over the peers' windows.
  int32_t algorithm_for(const Operation& op, int32_t selected) const;
  // ncclCommWindowRegister / ncclCommWindowDeregister of the communicator (windows.h: add is collective).
  Window* register_window(void* buffer, size_t bytes);
  void deregister_window(Window* window);
  // This rank's point-to-point messages of one group (collective.h, launch_p2p_group: only the ranks named take
  // part).
  cuda::CallResult launch_p2p(const std::vector<P2PMessage>& messages, cudaStream_t stream) const;
  // This rank's staging buffer for composed reductions (compositions.h): staging_bytes() of device memory, allocated
  // at the first use; null when it cannot be allocated.
  char* staging();
  static constexpr size_t staging_bytes() { return kStagingBytes; }
  // The reductions made by ncclRedOpCreatePreMulSum on this communicator (values from ncclNumOps up).
  ReductionTable& reductions() { return reductions_; }
  // The record of this rank's kernel that failed and stopped (error_record.cuh), "" when none did. Every launch
  // is then refused (CallStatus::kRefused).
  std::string failure() const;
  // kRefused with the failure's record where every call is refused, else kLaunched (GpuRank::refusal).
  cuda::CallResult refusal() const { return rank_->refusal(); }

 private:
  std::unique_ptr<BootstrapClient> bootstrap_;
  int device_ = 0;
  cudaStream_t abort_stream_ = nullptr;
  std::array<uint64_t, 2> abort_words_{};  // the failed and recorded words stop_kernels copies, kept until freed
  bool shares_gpu_ = false;
  // The grid cap of the streaming and in-place kernels: the rank's stream blocks shared by the most ranks one
  // process drives on one GPU, whose kernels must all be resident at once (the same on every rank).
  int32_t grid_cap_ = 0;
  const std::vector<select::Rule>* tuned_ = nullptr;
  std::unique_ptr<cuda::GpuRank> rank_;
  // The operations' state (above).
  static constexpr size_t kStagingBytes = 16ull << 20;
  cuda::DeviceBuffer staging_;
  ReductionTable reductions_;
  Windows windows_;
};

}  // namespace jax_mscclpp::nccl
