// The NCCL operations no collective kernel of ours runs, composed of point-to-point groups (collective.h,
// launch_p2p_group) and local folds (kernels/collectives/fold.h), for communicators NVIDIA's NCCL does not serve.
//
//   broadcast   the root sends its buffer to every rank (a local copy to itself when send != recv).
//   gather      every rank sends its block to the root, which receives block q at recv + q * block.
//   scatter     the root sends block q of its buffer to rank q.
//   reductions  (all-reduce, reduce-scatter, reduce with any of NCCL's reductions and data types, the 8-bit
//               floats included) in pieces that fit the rank's staging buffer: every rank that needs the result
//               receives the piece of every other rank into its staging buffer (its own piece copied there), then
//               folds the blocks in rank order into the output. All ranks fold the same blocks in the same order,
//               so they get the same bits. A reduce's other ranks only send. A pre-multiplied sum
//               (ncclRedOpCreatePreMulSum) multiplies by each rank's own factor: every rank multiplies what it
//               contributes, in its staging buffer, before the piece moves; the fold then sums.
//   one rank    on a communicator of one rank every collective is a copy (a PreMulSum: the fold of one block).
// The pieces depend only on the sizes and the world size, so every rank's messages pair up in order. Output may
// alias input (the fold reads staging only, and a piece's sends are done when its kernel ends), and may lie at any
// address (an output not aligned to its element is folded in the staging buffer and copied).
#pragma once

#include <cuda_runtime.h>

#include "routing.h"
#include "runtime_communicator.h"

namespace jax_mscclpp::nccl {

// Enqueues `op` as its kComposed route says (ncclBroadcast, ncclBcast, ncclGather, ncclScatter, and on one rank
// every collective; or, with route.fold, ncclAllReduce, ncclReduceScatter, ncclReduce) on op.stream, every launch
// through the rank's call entry (RuntimeCommunicator::run: point-to-point groups and local folds, FoldCall), so a
// rank whose kernel failed and stopped refuses it as it refuses every call (a reduction of no elements too). A
// launch failure with cudaErrorMemoryAllocation when the staging buffer cannot be had or is too small for one
// element of every rank; the calls' results otherwise.
cuda::CallResult launch_composed(RuntimeCommunicator& runtime, const Operation& op, const Route& route);

}  // namespace jax_mscclpp::nccl
