// Side streams and done events of started collectives (side_stream.h).
#include "side_stream.h"

#include <map>
#include <mutex>

#include "check.h"

namespace jax_mscclpp::cuda {
namespace {

// Streams and events live as long as the process: CUDA frees them with the context.
struct DeviceStreams {
  cudaStream_t side = nullptr;
  cudaEvent_t forked = nullptr;  // recorded on the compute stream at each fork; reusable once waited on
  std::map<int64_t, cudaEvent_t> done;
};

std::mutex streams_mutex;
std::map<int, DeviceStreams> streams_by_device;

// The streams of `device`, made on first use. Caller holds streams_mutex; throws CudaError.
DeviceStreams& streams_of(int device) {
  DeviceStreams& s = streams_by_device[device];
  if (!s.side) {
    DeviceGuard guard(device);
    int least = 0, greatest = 0;
    JAX_MSCCLPP_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    JAX_MSCCLPP_CUDA_CHECK(cudaEventCreateWithFlags(&s.forked, cudaEventDisableTiming));
    JAX_MSCCLPP_CUDA_CHECK(cudaStreamCreateWithPriority(&s.side, cudaStreamNonBlocking, greatest));
  }
  return s;
}

// Runs `body` under streams_mutex; a CudaError it throws becomes its code.
template <typename Body>
cudaError_t locked(Body body) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  try {
    body();
    return cudaSuccess;
  } catch (const CudaError& e) {
    return e.code();
  }
}

}  // namespace

cudaError_t fork_to_side_stream(int device, cudaStream_t compute, cudaStream_t* side) {
  return locked([&] {
    DeviceStreams& s = streams_of(device);
    JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(s.forked, compute));
    JAX_MSCCLPP_CUDA_CHECK(cudaStreamWaitEvent(s.side, s.forked, 0));
    *side = s.side;
  });
}

cudaError_t record_done(int device, int64_t call_id, cudaStream_t side) {
  return locked([&] {
    DeviceStreams& s = streams_of(device);
    cudaEvent_t& event = s.done[call_id];
    if (!event) {
      DeviceGuard guard(device);
      JAX_MSCCLPP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(event, side));
  });
}

cudaError_t join_done(int device, int64_t call_id, cudaStream_t compute) {
  return locked([&] {
    cudaEvent_t event = nullptr;
    auto d = streams_by_device.find(device);
    if (d != streams_by_device.end()) {
      auto it = d->second.done.find(call_id);
      if (it != d->second.done.end()) event = it->second;
    }
    if (!event) throw CudaError(cudaErrorInvalidResourceHandle, "a done without its start");
    JAX_MSCCLPP_CUDA_CHECK(cudaStreamWaitEvent(compute, event, 0));
  });
}

}  // namespace jax_mscclpp::cuda
