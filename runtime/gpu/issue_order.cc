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
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreateWithFlags(&eager_.event, cudaEventDisableTiming));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreateWithFlags(&captured_.event, cudaEventDisableTiming));
}

IssueOrder::~IssueOrder() {
  for (cudaEvent_t event : {eager_.event, captured_.event})
    if (event != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaEventDestroy(event));
}

cudaError_t IssueOrder::before(cudaStream_t stream) {
  // The same stream as the latest call of either kind (one stream, the common case): stream order already holds,
  // and the stream's capture need not be asked.
  if ((!eager_.recorded || stream == eager_.stream) && (!captured_.recorded || stream == captured_.stream))
    return cudaSuccess;
  unsigned long long capture = 0;
  if (const cudaError_t e = capture_of(stream, &capture); e != cudaSuccess) return e;
  const Latest& latest = capture == 0 ? eager_ : captured_;
  if (!latest.recorded || stream == latest.stream) return cudaSuccess;  // stream order already holds
  if (capture != 0 && capture != latest.capture) return cudaSuccess;   // the previous capture's call: another graph
  return cudaStreamWaitEvent(stream, latest.event, 0);
}

cudaError_t IssueOrder::after(cudaStream_t stream) {
  unsigned long long capture = 0;
  if (const cudaError_t e = capture_of(stream, &capture); e != cudaSuccess) return e;
  Latest& latest = capture == 0 ? eager_ : captured_;
  if (const cudaError_t e = cudaEventRecord(latest.event, stream); e != cudaSuccess) return e;
  latest.recorded = true;
  latest.stream = stream;
  latest.capture = capture;
  return cudaSuccess;
}

cudaError_t IssueOrder::eager_work() const {
  return eager_.recorded ? cudaEventQuery(eager_.event) : cudaSuccess;
}

}  // namespace jax_mscclpp::cuda
