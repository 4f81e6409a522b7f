#include "ragged_tables.h"

namespace jax_mscclpp {
namespace {

__global__ void write_ragged_tables_kernel(const RaggedTableValues v, char* dst) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= v.count) return;
  if (v.width == 4)
    reinterpret_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v.values[i]);
  else
    reinterpret_cast<int64_t*>(dst)[i] = v.values[i];
}

}  // namespace

cudaError_t write_ragged_tables(const RaggedTableValues& values, void* dst, cudaStream_t stream) {
  if (values.count < 0 || values.count > kRaggedTableMaxValues) return cudaErrorInvalidValue;
  if (values.count == 0) return cudaSuccess;
  write_ragged_tables_kernel<<<1, kRaggedTableMaxValues, 0, stream>>>(values, static_cast<char*>(dst));
  return cudaGetLastError();
}

}  // namespace jax_mscclpp
