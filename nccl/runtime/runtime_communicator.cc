#include "runtime_communicator.h"

#include <unistd.h>

#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "collectives/collective.h"
#include "dtype_codes.h"
#include "jax_mscclpp/block_layout.h"
#include "jax_mscclpp/codes.h"
#include "selection_table.h"

namespace jax_mscclpp::nccl {
namespace {

// What each rank tells the others at setup, before its endpoint bytes.
struct Identity {
  char gpu_uuid[16];
  int64_t host;
  int64_t process;
};

int64_t host_identity() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the host name
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

int32_t collective_of(ApiFunction function) {
  switch (function) {
    case ApiFunction::ncclAllReduce: return codes::kAllReduce;
    case ApiFunction::ncclAllGather: return codes::kAllGather;
    case ApiFunction::ncclReduceScatter: return codes::kReduceScatter;
    case ApiFunction::ncclAlltoAll: return codes::kAllToAll;
    case ApiFunction::ncclSend: case ApiFunction::ncclRecv: return codes::kPermute;
    default: return -1;
  }
}

bool reduces(int32_t collective) {
  return collective == codes::kAllReduce || collective == codes::kReduceScatter;
}

}  // namespace

RuntimeCommunicator::RuntimeCommunicator(const BootstrapAddress& root, int rank, int nranks)
    : bootstrap_(root, rank, nranks) {
  JAX_MSCCLPP_CUDA_CHECK(cudaGetDevice(&device_));
  const cuda::RankOptions options =
      cuda::gpu_rank_options(device_, rank, nranks, cuda::gpu_scratch_bytes_setting());
  rank_ = std::make_unique<cuda::GpuRank>(options, /*port_channels=*/false);

  cudaDeviceProp properties{};
  JAX_MSCCLPP_CUDA_CHECK(cudaGetDeviceProperties(&properties, device_));
  Identity mine{};
  std::memcpy(mine.gpu_uuid, &properties.uuid, sizeof(mine.gpu_uuid));
  mine.host = host_identity();
  mine.process = static_cast<int64_t>(getpid());
  const std::string frame = std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)) + rank_->endpoint();
  const std::vector<std::string> frames = bootstrap_.all_gather(frame, "ncclCommInitRank (jax_mscclpp setup)");
  std::vector<Identity> identities(nranks);
  for (int q = 0; q < nranks; ++q) {
    if (frames[q].size() < sizeof(Identity)) throw std::runtime_error("rank " + std::to_string(q) + " sent no identity");
    std::memcpy(&identities[q], frames[q].data(), sizeof(Identity));
  }
  // Every rank judges from the same identities, so all agree on shares_gpu_.
  for (int q = 0; q < nranks; ++q) {
    if (identities[q].host != mine.host) {
      throw std::runtime_error("rank " + std::to_string(q) + " is on another host: jax_mscclpp's NCCL library runs "
                               "communicators within one host");
    }
    for (int p = q + 1; p < nranks; ++p)
      if (std::memcmp(identities[q].gpu_uuid, identities[p].gpu_uuid, sizeof(mine.gpu_uuid)) == 0) shares_gpu_ = true;
  }
  std::set<std::pair<int64_t, int64_t>> processes;
  for (const Identity& id : identities) processes.insert({id.host, id.process});
  tuned_ = &tuned_rules(topology_name(properties.name, nranks, static_cast<int>(processes.size())));
  for (int q = 0; q < nranks; ++q)
    if (q != rank) rank_->connect(q, frames[q].substr(sizeof(Identity)));
  rank_->finalize();
}

RuntimeCommunicator::~RuntimeCommunicator() = default;

int32_t RuntimeCommunicator::algorithm_for(const Operation& op, bool nccl_can_run) const {
  const int32_t collective = collective_of(op.function);
  const size_t element = nccl_dtype_bytes(op.dtype);
  if (collective < 0 || element == 0) return -1;
  int32_t dtype = codes::kU8;  // data that only moves goes as bytes
  if (reduces(collective)) {
    dtype = reduction_dtype_code(op.dtype);
    if (dtype < 0 || reduce_op_code(op.op) < 0) return -1;
  }
  // Per-rank input bytes, as the table counts them.
  uint64_t nbytes = static_cast<uint64_t>(op.count) * element;
  if (collective == codes::kReduceScatter || collective == codes::kAllToAll) nbytes *= static_cast<uint64_t>(nranks());
  const int32_t algorithm = select_algorithm(*tuned_, collective, nbytes, nranks(), nccl_can_run && !shares_gpu_);
  if (algorithm < 0) return -1;
  const int32_t op_code = reduces(collective) ? reduce_op_code(op.op) : codes::kSum;
  if (!collective_supported(collective, algorithm, dtype, op_code)) return -1;
  return algorithm;
}

std::string RuntimeCommunicator::failure() const {
  const cuda::RuntimeConfigHost& config = rank_->rank_context().config();
  return config.stopped_on_failure() ? config.error_message() : std::string();
}

cudaError_t RuntimeCommunicator::launch(const Operation& op, int32_t algorithm) const {
  if (!failure().empty()) return kRefusedAfterFailure;
  const int32_t collective = collective_of(op.function);
  const size_t element = nccl_dtype_bytes(op.dtype);
  cuda::DeviceGuard guard(device_);
  const cudaError_t launched =
      reduces(collective)
          ? launch_collective(rank_->context(), collective, algorithm, op.send, op.recv, op.count,
                              reduction_dtype_code(op.dtype), reduce_op_code(op.op), op.stream)
          : launch_collective(rank_->context(), collective, algorithm, op.send, op.recv, op.count * element,
                              codes::kU8, codes::kSum, op.stream);
  if (launched != cudaSuccess) return launched;
  return rank_->poison_outputs_if_failed(op.recv, output_blocks(collective, size_t(nranks())) * op.count * element,
                                         op.stream);
}

cudaError_t RuntimeCommunicator::launch_permute(const Operation* send, const Operation* recv,
                                                int32_t algorithm) const {
  if (!failure().empty()) return kRefusedAfterFailure;
  const Operation& any = send != nullptr ? *send : *recv;
  const uint64_t bytes = static_cast<uint64_t>(any.count) * nccl_dtype_bytes(any.dtype);
  cuda::DeviceGuard guard(device_);
  const cudaError_t launched = jax_mscclpp::launch_permute(
      rank_->context(), algorithm, send != nullptr ? send->send : nullptr, recv != nullptr ? recv->recv : nullptr,
      bytes, codes::kU8, send != nullptr ? send->peer : -1, recv != nullptr ? recv->peer : -1, any.stream);
  if (launched != cudaSuccess || recv == nullptr) return launched;
  return rank_->poison_outputs_if_failed(recv->recv, bytes, any.stream);
}

}  // namespace jax_mscclpp::nccl
