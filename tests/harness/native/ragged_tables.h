// How the harness puts ragged_all_to_all's tables on the device (HarnessRank::ragged_all_to_all): a one-block
// kernel whose parameters carry the values, so the write is ordered on the rank's stream (after the calls before
// it, which may still read the buffer) and no host memory has to outlive the call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace jax_mscclpp {

constexpr int kRaggedTableMaxRanks = 64;
constexpr int kRaggedTableMaxValues = 4 * kRaggedTableMaxRanks;  // four tables of nranks entries

struct RaggedTableValues {
  int64_t values[kRaggedTableMaxValues];
  int32_t count;  // values used
  int32_t width;  // 4: written as int32, else as int64
};

// Writes values[0, count) as `width`-byte integers to `dst` on `stream`. cudaErrorInvalidValue for a count outside
// [0, kRaggedTableMaxValues]; count 0 enqueues nothing.
cudaError_t write_ragged_tables(const RaggedTableValues& values, void* dst, cudaStream_t stream);

}  // namespace jax_mscclpp
