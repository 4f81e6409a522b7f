// Our runtime's side of a communicator made through this library: one GPU rank (runtime/gpu/communicator.h) on the
// calling thread's current device, set up by meeting the other ranks through the bootstrap root of our unique id,
// the call entry the NCCL operations run through, and what they keep on the communicator (windows, staging, the
// reductions made on it).
//
// Contracts:
//   - Setup is collective, after the identity round (rank_identity.h) chose our runtime: every rank constructs its
//     RuntimeCommunicator over its bootstrap client with the same identities, and its rank meets the others through
//     the runtime's one setup (runtime/gpu/rank_setup.h, connect_all, over the bootstrap); the endpoint round
//     carries the tuning file's rules in force (agreement.h), and a difference throws Disagreement on every rank; a
//     rank missing for the timeout (JAX_MSCCLPP_TIMEOUT_S) fails every rank's setup with an error naming it. A
//     step that fails on one rank fails every rank's setup, naming that rank (bootstrap.h, report_failure); the
//     last round (ready) carries every rank's mailbox (mailbox.h), so no rank keeps a communicator whose peer has
//     none, and the survivors of a shrink can meet without the parent's bootstrap (mailbox_of).
//   - stop_kernels(): makes an abort visible to the device without waiting for any stream: the rank's waits stop
//     instead of trapping, and its failed and recorded words are set (call_inbox.cuh), so every SpinBound of its
//     kernels, running or queued, gives up at its next check and no record is written. kernels_stopped(): the
//     words have reached the device (the kernels give up from then on).
//   - wait_for_launched_work(): the host waits until the work this rank launched has ended on every stream it
//     launched on: under TimeoutPolicy::kFail at most the rank's kernel timeout (a kernel whose peer never comes
//     gives up by then), false when some has not ended by then; under kWait, the library's default, as long as it
//     takes, as NCCL's destroy does (ncclCommAbort is the way out), printing the late wait's warning once a kernel
//     waits past the timeout. ncclCommDestroy's wait for its outstanding operations. It waits on one event, the
//     rank's issue order's (runtime/gpu/issue_order.h, GpuRank::issued_work): recorded after every call run()
//     issues, each eager call waiting on the device for the one before it where their streams differ, so the
//     latest call's event completes only after every call issued before it, on any stream. Launches into a stream
//     being captured are the graph's (run when it is launched), not waited for. A device copy a composition
//     enqueues outside run() (compositions.cc) is covered where a later call follows it on its stream; a last one
//     moves bytes within the rank, waiting for no peer, and is not waited for here. No event of its own is recorded.
//   - shares_gpu(): two ranks drive one physical GPU (processes sharing a device), where NVIDIA's NCCL refuses to
//     run; then every operation we have a kernel for runs here at any size.
//   - Every launch goes through the rank's one call entry (run: GpuRank::run), on the operation's stream,
//     capture-safe. Which call runs an operation is routing.h's decision (route, collective_call), acted on by
//     operations.cc and compositions.cc.
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
#include "mailbox.h"
#include "our_runtime.h"
#include "rank_identity.h"
#include "reduction_table.h"
#include "routing.h"
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
  // Rank `q`'s process's mailbox (mailbox.h), as it said in the setup's last round.
  const MailboxAddress& mailbox_of(int q) const { return mailboxes_.at(q); }
  // The number of shrinks of this communicator this rank has taken part in before, then one more.
  int next_shrink() { return shrinks_++; }
  void stop_kernels();
  bool kernels_stopped() const;
  bool wait_for_launched_work();

  // ---- what the operations (operations.cc, compositions.cc) run on this rank ----
  // The tuning file's rules of the topology the communicator spans (selection.h, tuned_rules), beneath which the
  // built-in selection table decides (runtime/select).
  const std::vector<select::Rule>& tuned_rules() const { return *tuned_; }
  // Where the rank's calls run (routing.h, collective_call): its rank, the communicator's size, the grid cap and
  // the windows.
  CallPlace call_place() const { return {rank(), nranks(), grid_cap_, windows_}; }
  // Runs `call` through the rank's one call entry (runtime/gpu/call.h, GpuRank::run) on the communicator's GPU:
  // refused after a failed kernel, else launched on `stream` in issue order, its outputs poisoned where failing
  // kernels stop. A collective kernel needs every rank to run the same sequence; a point-to-point group only the
  // ranks it names; a fold (compositions.h) only this rank.
  cuda::CallResult run(const cuda::Call& call, cudaStream_t stream);
  cuda::GpuRank& gpu_rank() { return *rank_; }
  // ncclCommWindowRegister / ncclCommWindowDeregister of the communicator (windows.h: add is collective; `flags`
  // is winFlags).
  Window* register_window(void* buffer, size_t bytes, int flags);
  void deregister_window(Window* window);
  // ncclCommRegister / ncclCommDeregister of the communicator: ranges recorded on this rank (windows.h).
  void register_buffer(const void* buffer, size_t bytes) { windows_.add_buffer(buffer, bytes); }
  void deregister_buffer(const void* buffer, size_t bytes) { windows_.remove_buffer(buffer, bytes); }
  // This rank's staging buffer for composed reductions (compositions.h): staging_bytes() of device memory, allocated
  // at the first use; null when it cannot be allocated.
  char* staging();
  static constexpr size_t staging_bytes() { return kStagingBytes; }
  // The reductions made by ncclRedOpCreatePreMulSum on this communicator (values from ncclNumOps up).
  ReductionTable& reductions() { return reductions_; }
  // The record of this rank's kernel that failed and stopped (error_record.cuh), "" when none did. Every call
  // is then refused (CallStatus::kRefused).
  std::string failure() const;
  // The late report of a wait of this rank that passed the timeout and goes on (TimeoutPolicy::kWait, the
  // library's default: timeout_policy.h), worded once: "" until a later late wait reports again
  // (RuntimeConfigHost::take_late_report). Not a failure: nothing is refused for it.
  std::string take_late_report();

 private:
  std::unique_ptr<BootstrapClient> bootstrap_;
  std::vector<MailboxAddress> mailboxes_;  // by rank
  int shrinks_ = 0;
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
