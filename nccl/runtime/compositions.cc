#include "compositions.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dtype_codes.h"

namespace jax_mscclpp::nccl {
namespace {

P2PMessage send_to(int peer, const void* data, uint64_t bytes) {
  return {const_cast<char*>(static_cast<const char*>(data)), bytes, peer, 0};
}
P2PMessage receive_from(int peer, void* data, uint64_t bytes) { return {static_cast<char*>(data), bytes, peer, 1}; }

// A local copy as a pair of self messages (launch_p2p_group pairs them in order).
void copy_locally(std::vector<P2PMessage>& messages, int rank, const void* from, void* to, uint64_t bytes) {
  if (from == to || bytes == 0) return;
  messages.push_back(send_to(rank, from, bytes));
  messages.push_back(receive_from(rank, to, bytes));
}

cudaError_t launch_moves(const RuntimeCommunicator& runtime, const Operation& op, uint64_t block) {
  const int n = runtime.nranks(), me = runtime.rank(), root = op.root;
  const char* send = static_cast<const char*>(op.send);
  char* recv = static_cast<char*>(op.recv);
  std::vector<P2PMessage> messages;
  switch (op.function) {
    case ApiFunction::ncclBroadcast:
    case ApiFunction::ncclBcast:
      if (me == root) {
        for (int q = 0; q < n; ++q)
          if (q != me) messages.push_back(send_to(q, send, block));
        copy_locally(messages, me, send, recv, block);
      } else {
        messages.push_back(receive_from(root, recv, block));
      }
      break;
    case ApiFunction::ncclGather:
      if (me == root) {
        for (int q = 0; q < n; ++q)
          if (q != me) messages.push_back(receive_from(q, recv + q * block, block));
        copy_locally(messages, me, send, recv + me * block, block);
      } else {
        messages.push_back(send_to(root, send, block));
      }
      break;
    case ApiFunction::ncclScatter:
      if (me == root) {
        for (int q = 0; q < n; ++q)
          if (q != me) messages.push_back(send_to(q, send + q * block, block));
        copy_locally(messages, me, send + me * block, recv, block);
      } else {
        messages.push_back(receive_from(root, recv, block));
      }
      break;
    default: return cudaErrorInvalidValue;
  }
  return runtime.launch_p2p(messages, op.stream);
}

cudaError_t launch_reduction(RuntimeCommunicator& runtime, const Operation& op, const Fold& fold) {
  const int n = runtime.nranks(), me = runtime.rank();
  const uint64_t element = static_cast<uint64_t>(fold_element_bytes(fold.element));
  const bool scatters = op.function == ApiFunction::ncclReduceScatter;
  const bool to_root = op.function == ApiFunction::ncclReduce;
  const bool folds_here = !to_root || me == op.root;
  char* staging = folds_here ? runtime.staging() : nullptr;
  const uint64_t piece_cap = RuntimeCommunicator::staging_bytes() / (element * n);
  if ((folds_here && staging == nullptr) || piece_cap == 0) return cudaErrorMemoryAllocation;
  const char* send = static_cast<const char*>(op.send);
  char* recv = static_cast<char*>(op.recv);
  for (uint64_t first = 0; first < op.count; first += piece_cap) {
    const uint64_t len = std::min<uint64_t>(piece_cap, op.count - first), bytes = len * element;
    // What rank q contributes to the piece: reduce-scatter's block of the receiver, else the piece itself.
    const auto contribution = [&](int receiver) {
      return send + ((scatters ? static_cast<uint64_t>(receiver) * op.count : 0) + first) * element;
    };
    std::vector<P2PMessage> messages;
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (!to_root || q == op.root) messages.push_back(send_to(q, contribution(q), bytes));
      if (folds_here) messages.push_back(receive_from(q, staging + q * bytes, bytes));
    }
    if (folds_here) copy_locally(messages, me, contribution(me), staging + me * bytes, bytes);
    if (const cudaError_t e = runtime.launch_p2p(messages, op.stream); e != cudaSuccess) return e;
    if (!folds_here) continue;
    // The fold needs operands aligned to the element (fold.h): an output that is not folds into the staging
    // buffer's first block (read before written), then moves by DMA.
    char* out = recv + first * element;
    const bool aligned = reinterpret_cast<uintptr_t>(out) % element == 0;
    if (const cudaError_t e = launch_fold_blocks(staging, bytes, n, aligned ? out : staging, len, fold.element,
                                                 fold.op, fold.scalar, n, op.stream);
        e != cudaSuccess)
      return e;
    if (!aligned)
      if (const cudaError_t e = cudaMemcpyAsync(out, staging, bytes, cudaMemcpyDeviceToDevice, op.stream);
          e != cudaSuccess)
        return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_composed(RuntimeCommunicator& runtime, const Operation& op, const Fold* fold) {
  if (!runtime.failure().empty()) return kRefusedAfterFailure;
  if (fold != nullptr) return launch_reduction(runtime, op, *fold);
  return launch_moves(runtime, op, static_cast<uint64_t>(op.count) * nccl_dtype_bytes(op.dtype));
}

}  // namespace jax_mscclpp::nccl
