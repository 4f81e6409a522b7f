// One launch of the plan kernel (plan_kernel.cuh) for element type T and reduction Op: the link between the
// executor's host side (executor.cu), which picks T and Op from the call's codes, and the plan_kernels_<dtype>.cu
// files generated from codes.def (kernels/CMakeLists.txt), one per dtype, which instantiate the kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "collectives/collective.h"
#include "executor/executor.h"

namespace jax_mscclpp {

// Most CUDA threads per block of the plan kernel (its launch bound).
constexpr int kPlanMaxThreads = 512;

// One piece of a call: block_count elements of every block (blocks block_stride elements apart) from the
// piece's first element of input and output block 0; half0 / half1 are the byte offsets of the plan's two
// scratch halves (epoch parity picks one).
struct PlanPiece {
  const char* in;
  char* out;
  uint64_t block_count;
  uint64_t block_stride;
  uint64_t half0;
  uint64_t half1;
};

// Launches the kernel for one piece on `stream`; returns the launch error.
template <class T, class Op>
cudaError_t launch_plan_piece(const CollectiveContext& ctx, const DevicePlan& plan, const PlanPiece& piece,
                              cudaStream_t stream);

// How many blocks of the kernel for `plan` (its threads, its image bytes of shared memory, the kernel's registers)
// one multiprocessor of the current device holds at once, into *blocks.
template <class T, class Op>
cudaError_t plan_blocks_per_multiprocessor(const DevicePlan& plan, int* blocks);

}  // namespace jax_mscclpp
