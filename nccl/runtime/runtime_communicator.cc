#include "runtime_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "check.h"
#include "collectives/collective.h"
#include "rank_setup.h"
#include "select/tuning_file.h"
#include "selection.h"
#include "timeout_policy.h"

namespace jax_mscclpp::nccl {
namespace {

// The tuning file's rules in force, as one agreement field (agreement.h): every rank must select alike.
AgreementField tuning_field(const std::vector<select::Rule>& rules) {
  std::string bytes;
  for (const select::Rule& r : rules)
    bytes += std::to_string(r.collective) + "," + std::to_string(r.max_bytes) + "," + std::to_string(r.code) + ";";
  return {"tuning file rules (JAX_MSCCLPP_TUNING_FILE)",
          std::to_string(rules.size()) + " rules, digest " + digest_hex(bytes)};
}

}  // namespace

namespace {

// The bootstrap as the setup's exchange (rank_setup.h): this rank's frame published, every rank's read from one
// all-gather at the first fetch (every rank of a communicator of several fetches, so every rank gathers).
class BootstrapExchange : public cuda::Exchange {
 public:
  explicit BootstrapExchange(BootstrapClient& bootstrap) : bootstrap_(bootstrap) {}
  void publish(int, const std::string& frame) override { mine_ = frame; }
  std::string fetch(int rank) override {
    if (frames_.empty()) frames_ = bootstrap_.all_gather(mine_, "ncclCommInitRank (jax_mscclpp endpoints)");
    return frames_.at(rank);
  }

 private:
  BootstrapClient& bootstrap_;
  std::string mine_;
  std::vector<std::string> frames_;
};

}  // namespace

RuntimeCommunicator::RuntimeCommunicator(std::unique_ptr<BootstrapClient> bootstrap,
                                         const std::vector<RankIdentity>& identities, const Backend& backend)
    : bootstrap_(std::move(bootstrap)) {
  // A step that fails on this rank fails every rank's setup, naming this one (bootstrap.h, report_failure): the
  // ready round below, which carries every rank's mailbox, is the last, so no rank keeps a communicator whose peer
  // has none.
  try {
    const int rank = bootstrap_->rank(), nranks = bootstrap_->nranks();
    JAX_MSCCLPP_CUDA_CHECK(cudaGetDevice(&device_));
    cuda::RankOptions options = cuda::gpu_rank_options(device_, rank, nranks, cuda::gpu_scratch_bytes_setting());
    options.on_timeout = library_timeout_policy();
    options.exchange_allocations = true;  // registered buffers, reached in place by ranks of other processes
    rank_ = std::make_unique<cuda::GpuRank>(options, /*port_channels=*/false);
    // The topology (and so the tuning file) follows from the identities, the same on every rank; its rules are
    // compared in the endpoint round, the first that knows them.
    tuned_ = &jax_mscclpp::nccl::tuned_rules(
        select::topology_name("gpu", identities[rank].gpu_name, nranks, backend.processes));
    std::vector<int> everyone(nranks);
    for (int q = 0; q < nranks; ++q) everyone[q] = q;
    BootstrapExchange exchange(*bootstrap_);
    const auto compare = [nranks](const std::map<int, std::string>& fields) {
      std::vector<Agreement> agreements(nranks);
      for (const auto& [q, bytes] : fields)
        if (!decode_agreement(bytes, &agreements[q]))
          throw std::runtime_error("rank " + std::to_string(q) + " sent no endpoint");
      if (const std::string difference = agreement_difference(agreements); !difference.empty())
        throw Disagreement(difference);
    };
    const cuda::ConnectedRanks connected = cuda::connect_all({{rank_.get(), rank, everyone}}, exchange,
                                                             encode_agreement({tuning_field(*tuned_)}), compare);
    shares_gpu_ = connected.shares_gpu;
    // Kernels of ranks of one process on one GPU run at once (those of other processes take turns on it), and every
    // block of every rank's launch must then be resident together.
    std::map<std::string, int> ranks_per_gpu;
    int most = 1;
    for (const auto& [q, identity] : connected.identities)
      most = std::max(most, ++ranks_per_gpu[identity.host + "/" + std::to_string(identity.process) + "/" +
                                            identity.gpu_uuid]);
    grid_cap_ = cuda::shared_gpu_grid(options.stream_blocks, most);
    const auto ready = bootstrap_->all_gather(encode_mailbox_address(process_mailbox()), "ncclCommInitRank (ready)");
    mailboxes_.resize(nranks);
    for (int q = 0; q < nranks; ++q)
      if (!decode_mailbox_address(ready[q], &mailboxes_[q]))
        throw std::runtime_error("rank " + std::to_string(q) + " sent no mailbox in the setup's last round");
  } catch (const RankFailed&) {
    throw;
  } catch (const std::exception& error) {
    bootstrap_->report_failure(error.what());
    throw;
  } catch (...) {
    bootstrap_->report_failure("an unknown exception");
    throw;
  }
}

RuntimeCommunicator::~RuntimeCommunicator() {
  if (abort_stream_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaStreamDestroy(abort_stream_));
}

void RuntimeCommunicator::stop_kernels() {
  cuda::RankContext& context = rank_->rank_context();
  // 1. The rank's waits stop rather than trap from now on (host memory the device reads at every slow-path check).
  context.config().stop_on_failure_now();
  // 2. Its failed word (a mark of its own) and its recorded word (no record is claimed: nothing failed on the
  //    device), in device memory, through a stream of their own that waits for no other: every SpinBound of its
  //    kernels, queued or stuck, gives up at its next check.
  abort_words_ = {static_cast<uint64_t>(rank()) + 1, 1};
  char* inbox = context.scratch() + call_inbox_offset(context.scratch_bytes());
  cuda::DeviceGuard guard(device_);
  if (abort_stream_ == nullptr && cudaStreamCreateWithFlags(&abort_stream_, cudaStreamNonBlocking) != cudaSuccess) {
    abort_stream_ = nullptr;
    return;
  }
  JAX_MSCCLPP_CUDA_IGNORE(cudaMemcpyAsync(inbox, abort_words_.data(), sizeof(abort_words_), cudaMemcpyHostToDevice,
                                          abort_stream_));
}

bool RuntimeCommunicator::kernels_stopped() const {
  return abort_stream_ == nullptr || cudaStreamQuery(abort_stream_) != cudaErrorNotReady;
}

std::string RuntimeCommunicator::failure() const {
  const cuda::RuntimeConfigHost& config = rank_->rank_context().config();
  return config.stopped_on_failure() ? config.error_message() : std::string();
}

std::string RuntimeCommunicator::take_late_report() { return rank_->rank_context().config().take_late_report(); }

cuda::CallResult RuntimeCommunicator::run(const cuda::Call& call, cudaStream_t stream) {
  cuda::DeviceGuard guard(device_);
  return rank_->run(call, stream);
}

bool RuntimeCommunicator::wait_for_launched_work() {
  // One event marks the end of all of the rank's issued work (the header's contract): the rank's issue order's.
  // Bounded by the timeout where waits past it fail; under kWait as long as the work takes, as NCCL's destroy, with
  // the late wait's warning where a kernel waits past the timeout meanwhile.
  const cuda::RuntimeConfigHost& config = rank_->rank_context().config();
  const bool bounded = config.timeout_policy() == TimeoutPolicy::kFail;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(config.timeout_seconds());
  while (rank_->issued_work() == cudaErrorNotReady) {
    if (bounded && std::chrono::steady_clock::now() >= deadline) return false;
    if (!bounded)
      if (const std::string late = take_late_report(); !late.empty())
        std::fprintf(stderr, "%s\n", late_wait_warning(late).c_str());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  (void)cudaGetLastError();  // an event whose work failed answers with the failure, which the frees report anyway
  return true;
}

Window* RuntimeCommunicator::register_window(void* buffer, size_t bytes, int flags) {
  cuda::DeviceGuard guard(device_);
  return windows_.add(*bootstrap_, device_, buffer, bytes, flags);
}

void RuntimeCommunicator::deregister_window(Window* window) {
  cuda::DeviceGuard guard(device_);
  windows_.remove(window);
}

char* RuntimeCommunicator::staging() {
  if (staging_.get() == nullptr) {
    try {
      cuda::DeviceGuard guard(device_);
      staging_ = cuda::DeviceBuffer(device_, kStagingBytes);
    } catch (const std::exception&) {
      return nullptr;
    }
  }
  return staging_.get();
}

}  // namespace jax_mscclpp::nccl
