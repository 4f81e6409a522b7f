#include "fifo_probe.h"

#include <chrono>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "check.h"
#include "harness.h"

namespace jax_mscclpp::cuda {

FifoProbe::FifoProbe(int device, uint32_t fifo_size, double timeout_s)
    : device_(device), fifo_size_(fifo_size), config_(0, timeout_s, /*stop_on_failure=*/false) {
  DeviceGuard g(device);
  proxy_ = std::make_unique<ProxyService>(device, fifo_size);
  proxy_->set_custom_handler(1, [this](const ProxyTrigger& t) {
    uint32_t every, us;
    size_t count;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(t);
      count = seen_.size();
      every = sleep_every_;
      us = sleep_us_;
    }
    if (every != 0 && count % every == 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  });
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

FifoProbe::~FifoProbe() {
  proxy_.reset();  // joins the proxy thread
  if (stream_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaStreamDestroy(stream_));
}

FifoProbeResult FifoProbe::run(uint32_t ntriggers, uint32_t pushers, uint32_t sleep_every, uint32_t sleep_us) {
  DeviceGuard g(device_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.clear();
    sleep_every_ = sleep_every;
    sleep_us_ = sleep_us;
  }
  const uint64_t tail0 = proxy_->triggers_handled();
  cudaEvent_t start, stop;
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreate(&start));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreate(&stop));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(start, stream_));
  JAX_MSCCLPP_CUDA_CHECK(launch_fifo_pushers(proxy_->fifo_handle(config_.site(-1)), ntriggers, pushers, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(stop, stream_));
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    std::string msg = std::string("jax_mscclpp: FIFO probe kernel failed: ") + cudaGetErrorString(e);
    const std::string rec = config_.error_message();
    if (!rec.empty()) msg += "\n" + rec;
    throw std::runtime_error(msg);
  }
  FifoProbeResult r;
  JAX_MSCCLPP_CUDA_CHECK(cudaEventElapsedTime(&r.elapsed_ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  // Every pusher synced on its last trigger, so the proxy has handled them all; its counter of handled
  // triggers moves just after the tail, so give it a moment.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (proxy_->triggers_handled() - tail0 < ntriggers && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  std::vector<ProxyTrigger> seen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seen = seen_;
  }
  r.received = seen.size();
  std::vector<uint32_t> next(pushers, 0);
  std::unordered_set<uint32_t> indices;
  for (const ProxyTrigger& t : seen) {
    const uint32_t pusher = static_cast<uint32_t>(t.fst >> 32), seq = static_cast<uint32_t>(t.fst);
    if (pusher >= pushers || seq != next[pusher]) {
      r.in_order = false;
    } else {
      ++next[pusher];
    }
    if (trigger_type(t) != kTriggerCustom || trigger_channel(t) != 1) r.in_order = false;
    indices.insert(static_cast<uint32_t>(t.snd));
  }
  r.distinct = indices.size();
  r.tail = proxy_->triggers_handled() - tail0;
  r.wraps = r.tail / fifo_size_;
  r.proxy_error = proxy_->error();
  r.longest_trigger_s = proxy_->longest_trigger_seconds();
  return r;
}

}  // namespace jax_mscclpp::cuda
