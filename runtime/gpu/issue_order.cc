#include "issue_order.h"

#include "check.h"

namespace jax_mscclpp::cuda {
namespace {

// The id of the capture `stream` is recording into, 0 where it is not capturing.
cudaError_t capture_of(cudaStream_t stream, unsigned long long* id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture = 0;
  const cudaError_t e = cudaStreamGetCaptureInfo(stream, &status, &capture);
  *id = status == cudaStreamCaptureStatusActive ? capture : 0;
  return e;
}

}  // namespace

IssueOrder::IssueOrder(int device) {
  DeviceGuard on(device);
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

IssueOrder::~IssueOrder() {
  if (event_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaEventDestroy(event_));
}

cudaError_t IssueOrder::before(cudaStream_t stream) {
  if (!recorded_ || stream == last_) return cudaSuccess;  // stream order already holds
  unsigned long long capture = 0;
  if (const cudaError_t e = capture_of(stream, &capture); e != cudaSuccess) return e;
  if (capture != last_capture_) return cudaSuccess;  // different graphs, or a graph and eager work
  return cudaStreamWaitEvent(stream, event_, 0);
}

cudaError_t IssueOrder::after(cudaStream_t stream) {
  unsigned long long capture = 0;
  if (const cudaError_t e = capture_of(stream, &capture); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaEventRecord(event_, stream); e != cudaSuccess) return e;
  recorded_ = true;
  last_ = stream;
  last_capture_ = capture;
  return cudaSuccess;
}

}  // namespace jax_mscclpp::cuda
