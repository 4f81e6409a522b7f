// An NCCL operation (our_runtime.h, Operation) as our kernels take it, decoded once per operation: route()
// (routing.h) decodes it, and everything after (the selection, the rank's call, the compositions) reads the decoded
// form carried in the route, never the NCCL arguments again.
//
// Contracts:
//   - element: bytes of one element of NCCL's data type, 0 for a type NCCL does not define (the operation is then
//     refused or forwarded: nothing reads the other fields).
//   - block_bytes: one block of the operation, count * element: the buffer of all-reduce, broadcast and the
//     point-to-point messages; one rank's block of all-gather, reduce-scatter, all-to-all, gather and scatter.
//   - collective: the collective (codes.def) a collective kernel runs the function with; -1 for the others.
//   - dtype, op, block_count: the collective kernel's arguments. A reduction (all-reduce, reduce-scatter) keeps its
//     elements: the reduction's dtype code (-1 where our kernels do not reduce the type: the 8-bit floats) and
//     reduce-op code (-1 for prod, avg and pre-multiplied sums), count elements per block. Data that only moves goes
//     as bytes: u8, sum (ignored by the moves), block_bytes per block. For a function no collective kernel runs,
//     they are the moves' (u8, sum, block_bytes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "our_runtime.h"

namespace jax_mscclpp::nccl {

struct DecodedOperation {
  size_t element;
  uint64_t block_bytes;
  int32_t collective;
  int32_t dtype;
  int32_t op;
  uint64_t block_count;
  // Whether a collective kernel of ours runs the function with this (dtype, reduction) (routing.h still asks the
  // table for the size and collective_supported for the algorithm).
  bool kernel_runs() const { return collective >= 0 && dtype >= 0 && op >= 0; }
};

DecodedOperation decode_operation(const Operation& op);

// How many operations this process decoded: the tests' check that every operation is decoded once.
uint64_t operations_decoded();

}  // namespace jax_mscclpp::nccl
