#include "runtime_communicator.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "collectives/collective.h"
#include "dtype_codes.h"
#include "jax_mscclpp/block_layout.h"
#include "jax_mscclpp/codes.h"
#include "byte_frame.h"
#include "select/tuning_file.h"
#include "selection.h"

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

RuntimeCommunicator::RuntimeCommunicator(std::unique_ptr<BootstrapClient> bootstrap,
                                         const std::vector<RankIdentity>& identities, const Backend& backend)
    : bootstrap_(std::move(bootstrap)), shares_gpu_(backend.shares_gpu) {
  const int rank = bootstrap_->rank(), nranks = bootstrap_->nranks();
  JAX_MSCCLPP_CUDA_CHECK(cudaGetDevice(&device_));
  const cuda::RankOptions options =
      cuda::gpu_rank_options(device_, rank, nranks, cuda::gpu_scratch_bytes_setting());
  rank_ = std::make_unique<cuda::GpuRank>(options, /*port_channels=*/false);
  // The topology (and so the tuning file) follows from the identities, the same on every rank; its rules are
  // compared in the endpoint round, the first that knows them.
  tuned_ = &jax_mscclpp::nccl::tuned_rules(
      select::topology_name("gpu", identities[rank].gpu_name, nranks, backend.processes));
  FrameWriter frame;
  frame.text(encode_agreement({tuning_field(*tuned_)}));
  const std::vector<std::string> frames =
      bootstrap_->all_gather(frame.bytes() + rank_->endpoint(), "ncclCommInitRank (jax_mscclpp endpoints)");
  std::vector<Agreement> agreements(nranks);
  std::vector<std::string> endpoints(nranks);
  for (int q = 0; q < nranks; ++q) {
    FrameReader in(frames[q]);
    std::string fields;
    if (!in.text(&fields) || !decode_agreement(fields, &agreements[q]))
      throw std::runtime_error("rank " + std::to_string(q) + " sent no endpoint");
    endpoints[q] = in.rest();
  }
  if (const std::string difference = agreement_difference(agreements); !difference.empty())
    throw Disagreement(difference);
  for (int q = 0; q < nranks; ++q)
    if (q != rank) rank_->connect(q, endpoints[q]);
  rank_->finalize();
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

cudaError_t RuntimeCommunicator::launch(const Operation& op, int32_t algorithm) const {
  if (!failure().empty()) return kRefusedAfterFailure;
  const int32_t collective = collective_code(op.function);
  const size_t element = nccl_dtype_bytes(op.dtype);
  cuda::DeviceGuard guard(device_);
  const cudaError_t launched =
      collective_reduces(collective)
          ? launch_collective(rank_->context(), collective, algorithm, op.send, op.recv, op.count,
                              reduction_dtype_code(op.dtype), reduce_op_code(op.op), op.stream)
          : launch_collective(rank_->context(), collective, algorithm, op.send, op.recv, op.count * element,
                              codes::kU8, codes::kSum, op.stream);
  if (launched != cudaSuccess) return launched;
  return rank_->poison_outputs_if_failed(op.recv, output_blocks(collective, size_t(nranks())) * op.count * element,
                                         op.stream);
}

cudaError_t RuntimeCommunicator::launch_p2p(const std::vector<P2PMessage>& messages, cudaStream_t stream) const {
  if (!failure().empty()) return kRefusedAfterFailure;
  if (messages.empty()) return cudaSuccess;
  cuda::DeviceGuard guard(device_);
  const cudaError_t launched =
      launch_p2p_group(rank_->context(), messages.data(), static_cast<int>(messages.size()), stream);
  if (launched != cudaSuccess) return launched;
  for (const P2PMessage& m : messages) {
    if (!m.receive) continue;
    if (const cudaError_t e = rank_->poison_outputs_if_failed(m.buffer, m.bytes, stream); e != cudaSuccess) return e;
  }
  return cudaSuccess;
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
