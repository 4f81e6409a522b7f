// Side streams and done events of started collectives (side_stream.h).
#include "side_stream.h"

#include <map>
#include <mutex>
#include <utility>

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

// Runs `make` with `device` current, then restores the caller's device.
template <typename Make>
cudaError_t on_device(int device, Make make) {
  int previous = -1;
  cudaError_t err = cudaGetDevice(&previous);
  if (err != cudaSuccess) return err;
  if (previous != device && (err = cudaSetDevice(device)) != cudaSuccess) return err;
  err = make();
  if (previous != device) {
    const cudaError_t restored = cudaSetDevice(previous);
    if (err == cudaSuccess) err = restored;
  }
  return err;
}

cudaError_t streams_of(int device, DeviceStreams** out) {
  DeviceStreams& s = streams_by_device[device];
  if (!s.side) {
    const cudaError_t err = on_device(device, [&] {
      int least = 0, greatest = 0;
      cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
      if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&s.side, cudaStreamNonBlocking, greatest);
      if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s.forked, cudaEventDisableTiming);
      return e;
    });
    if (err != cudaSuccess) {
      s.side = nullptr;
      return err;
    }
  }
  *out = &s;
  return cudaSuccess;
}

}  // namespace

cudaError_t fork_to_side_stream(int device, cudaStream_t compute, cudaStream_t* side) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  DeviceStreams* s = nullptr;
  cudaError_t err = streams_of(device, &s);
  if (err == cudaSuccess) err = cudaEventRecord(s->forked, compute);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(s->side, s->forked, 0);
  if (err == cudaSuccess) *side = s->side;
  return err;
}

cudaError_t record_done(int device, int64_t call_id, cudaStream_t side) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  DeviceStreams* s = nullptr;
  cudaError_t err = streams_of(device, &s);
  if (err != cudaSuccess) return err;
  auto [it, fresh] = s->done.try_emplace(call_id, nullptr);
  if (fresh) {
    err = on_device(device, [&] { return cudaEventCreateWithFlags(&it->second, cudaEventDisableTiming); });
    if (err != cudaSuccess) {
      s->done.erase(it);
      return err;
    }
  }
  return cudaEventRecord(it->second, side);
}

cudaError_t join_done(int device, int64_t call_id, cudaStream_t compute) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  auto d = streams_by_device.find(device);
  if (d == streams_by_device.end()) return cudaErrorInvalidResourceHandle;
  auto it = d->second.done.find(call_id);
  if (it == d->second.done.end()) return cudaErrorInvalidResourceHandle;
  return cudaStreamWaitEvent(compute, it->second, 0);
}

}  // namespace jax_mscclpp::cuda
