#include "compositions.h"

#include <algorithm>
#include <cstdint>
#include <vector>

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

// A point-to-point group of this rank (launch_p2p_group) through the call entry.
cuda::CallResult run_messages(RuntimeCommunicator& runtime, const std::vector<P2PMessage>& messages,
                              cudaStream_t stream) {
  return runtime.run(cuda::PointToPointCall{messages.data(), static_cast<int>(messages.size())}, stream);
}

cuda::CallResult launch_moves(RuntimeCommunicator& runtime, const Operation& op, uint64_t block) {
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
    default:
      // A communicator of one rank: every collective is a copy of its one block.
      if (n != 1) return cuda::launch_result(cudaErrorInvalidValue, "a composition of several ranks");
      copy_locally(messages, me, send, recv, block);
  }
  return run_messages(runtime, messages, op.stream);
}

// kPreMulSum multiplies each rank's contribution by that rank's own factor (NCCL's contract: ranks may pass
// different factors), so the contributor multiplies before its piece moves: `from` (any alignment) times this
// rank's factor into `to` (staging, aligned), rounded to the element type as NCCL's pre-operation is.
cuda::CallResult premultiply(RuntimeCommunicator& runtime, const char* from, char* to, uint64_t len, uint64_t element,
                             const Fold& fold, cudaStream_t stream) {
  const uint64_t bytes = len * element;
  if (reinterpret_cast<uintptr_t>(from) % element != 0) {
    if (const cudaError_t e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream); e != cudaSuccess)
      return cuda::launch_result(e, "the pre-multiplication");
    from = to;
  }
  return runtime.run(cuda::FoldCall{from, bytes, 1, to, len, fold.element, FoldOp::kPreMulSum, fold.scalar, 1},
                     stream);
}

cuda::CallResult launch_reduction(RuntimeCommunicator& runtime, const Operation& op, const Fold& fold) {
  const int n = runtime.nranks(), me = runtime.rank();
  const uint64_t element = static_cast<uint64_t>(fold_element_bytes(fold.element));
  const bool scatters = op.function == ApiFunction::ncclReduceScatter;
  const bool to_root = op.function == ApiFunction::ncclReduce;
  const bool folds_here = !to_root || me == op.root;
  // Staging: n received blocks, then (kPreMulSum) this rank's pre-multiplied contributions: one per receiver for
  // a reduce-scatter, else one.
  const bool premultiplies = fold.op == FoldOp::kPreMulSum;
  const int outgoing_blocks = premultiplies ? (scatters ? n : 1) : 0;
  const FoldOp fold_op = premultiplies ? FoldOp::kSum : fold.op;
  char* staging = folds_here || premultiplies ? runtime.staging() : nullptr;
  const uint64_t piece_cap = RuntimeCommunicator::staging_bytes() / (element * (n + outgoing_blocks));
  if ((folds_here || premultiplies) && staging == nullptr)
    return cuda::launch_result(cudaErrorMemoryAllocation, "the staging buffer's allocation");
  if (piece_cap == 0) return cuda::launch_result(cudaErrorMemoryAllocation, "a piece of the staging buffer");
  const char* send = static_cast<const char*>(op.send);
  char* recv = static_cast<char*>(op.recv);
  for (uint64_t first = 0; first < op.count; first += piece_cap) {
    const uint64_t len = std::min<uint64_t>(piece_cap, op.count - first), bytes = len * element;
    char* premultiplied = premultiplies ? staging + static_cast<uint64_t>(n) * bytes : nullptr;
    // What this rank contributes to `receiver`'s piece: reduce-scatter's block of the receiver, else the piece
    // itself; pre-multiplied in staging for kPreMulSum.
    const auto given = [&](int receiver) {
      return send + ((scatters ? static_cast<uint64_t>(receiver) * op.count : 0) + first) * element;
    };
    const auto contribution = [&](int receiver) -> const char* {
      if (!premultiplies) return given(receiver);
      return premultiplied + (scatters ? static_cast<uint64_t>(receiver) : 0) * bytes;
    };
    for (int b = 0; b < outgoing_blocks; ++b)
      if (cuda::CallResult made = premultiply(runtime, given(b), premultiplied + b * bytes, len, element, fold,
                                              op.stream);
          !made.launched())
        return made;
    std::vector<P2PMessage> messages;
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (!to_root || q == op.root) messages.push_back(send_to(q, contribution(q), bytes));
      if (folds_here) messages.push_back(receive_from(q, staging + q * bytes, bytes));
    }
    if (folds_here) copy_locally(messages, me, contribution(me), staging + me * bytes, bytes);
    if (cuda::CallResult moved = run_messages(runtime, messages, op.stream); !moved.launched()) return moved;
    if (!folds_here) continue;
    // The fold needs operands aligned to the element (fold.h): an output that is not folds into the staging
    // buffer's first block (read before written), then moves by DMA.
    char* out = recv + first * element;
    const bool aligned = reinterpret_cast<uintptr_t>(out) % element == 0;
    if (cuda::CallResult folded = runtime.run(
            cuda::FoldCall{staging, bytes, n, aligned ? out : staging, len, fold.element, fold_op, fold.scalar, n},
            op.stream);
        !folded.launched())
      return folded;
    if (!aligned)
      if (const cudaError_t e = cudaMemcpyAsync(out, staging, bytes, cudaMemcpyDeviceToDevice, op.stream);
          e != cudaSuccess)
        return cuda::launch_result(e, "the copy of a folded piece");
  }
  return {};
}

}  // namespace

cuda::CallResult launch_composed(RuntimeCommunicator& runtime, const Operation& op, const Route& route) {
  if (!route.fold) return launch_moves(runtime, op, route.decoded.block_bytes);
  // No elements: nothing moves, and the empty group is still refused where the rank's calls are.
  if (op.count == 0) return run_messages(runtime, {}, op.stream);
  return launch_reduction(runtime, op, *route.fold);
}

}  // namespace jax_mscclpp::nccl
