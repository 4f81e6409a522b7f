// fold_blocks: a local reduction of blocks that already sit in this rank's memory, for the reductions no collective
// kernel runs (the NCCL-API library composes them: point-to-point moves the blocks, then this kernel folds them).
// Its element types are every type of NCCL's API, the 8-bit floats included; its operations NCCL's.
//
// Contract: out[i] = block(0)[i] (op) block(1)[i] (op) ... (op) block(n-1)[i], block(q) = blocks + q * block_stride,
// for i < count, a left fold in block order, accumulated in float for the 16- and 8-bit floats (one rounding at the
// end), in the element type otherwise (integers wrap). Every rank folding the same blocks gets the same bits.
//   kAvg:       floats: the sum of x * (1 / divisor) (NCCL's pre-multiplied average); integers: the sum divided by
//               `divisor` (truncating).
//   kPreMulSum: the sum of x * scalar, the scalar of the element type (FoldScalar: read from device memory when the
//               kernel runs, or the bits given at launch).
//   kMax/kMin:  a NaN operand wins.
// `blocks`, `block_stride` and `out` are aligned to the element's size; `out` may be one of the blocks (element i is
// read from every block before it is written). The scalar may lie anywhere. No XLA or NCCL types here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace jax_mscclpp {

enum class FoldElement : int32_t { kS8, kU8, kS32, kU32, kS64, kU64, kF16, kF32, kF64, kBF16, kF8E4M3, kF8E5M2 };
enum class FoldOp : int32_t { kSum, kProd, kMax, kMin, kAvg, kPreMulSum };

// kPreMulSum's factor: `device` (an element in device memory, read by the kernel) when not null, else the element
// whose bytes are the low bytes of `bits`.
struct FoldScalar {
  const void* device = nullptr;
  uint64_t bits = 0;
};

// Bytes of one element.
int fold_element_bytes(FoldElement element);

// Enqueues the fold on `stream`: one kernel. cudaErrorInvalidValue for nblocks < 1, an unknown element or op, a kAvg
// divisor below 1, or operands not aligned to the element. count 0 launches nothing. `failed`: the rank's failed word
// where its failing kernels stop rather than trap (collectives/collective.h, FailedOutputs), else null: a block of
// the fold that starts with it set writes every bit of its share of `out` instead of the fold (its blocks came from
// the rank's kernels before it on the stream, which failed), so that the fold's output cannot pass for a result.
cudaError_t launch_fold_blocks(const char* blocks, uint64_t block_stride, int nblocks, char* out, uint64_t count,
                               FoldElement element, FoldOp op, FoldScalar scalar, int divisor, const uint64_t* failed,
                               cudaStream_t stream);

}  // namespace jax_mscclpp
