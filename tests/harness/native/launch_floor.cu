#include "launch_floor.h"

#include <cuda_runtime.h>

#include <chrono>
#include <stdexcept>

#include "check.h"

namespace jax_mscclpp {
namespace {

__global__ void empty_kernel() {}

}  // namespace

std::vector<double> time_launch_floor(int device, int calls, int rounds, bool issue_order_calls) {
  if (calls < 1 || rounds < 1) throw std::invalid_argument("jax_mscclpp: no calls or rounds");
  cuda::DeviceGuard on(device);
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  std::vector<double> host_us;
  cudaError_t failed = cudaSuccess;
  for (int round = -2; round < rounds && failed == cudaSuccess; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls && failed == cudaSuccess; ++i) {
      empty_kernel<<<1, 1, 0, stream>>>();
      failed = cudaGetLastError();
      if (issue_order_calls && failed == cudaSuccess) {
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        unsigned long long capture = 0;
        failed = cudaStreamGetCaptureInfo(stream, &status, &capture);
        if (failed == cudaSuccess) failed = cudaEventRecord(event, stream);
      }
    }
    const auto issued = std::chrono::steady_clock::now();
    if (failed == cudaSuccess) failed = cudaStreamSynchronize(stream);
    if (round >= 0) host_us.push_back(std::chrono::duration<double, std::micro>(issued - start).count() / calls);
  }
  JAX_MSCCLPP_CUDA_IGNORE(cudaEventDestroy(event));
  JAX_MSCCLPP_CUDA_IGNORE(cudaStreamDestroy(stream));
  JAX_MSCCLPP_CUDA_CHECK(failed);
  return host_us;
}

}  // namespace jax_mscclpp
