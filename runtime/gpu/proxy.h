// The host side of PortChannel: the proxy FIFO and the proxy thread.
//
// One ProxyService per process and device (ProxyService::shared) serves every PortChannel of that device:
// one thread polls one FIFO (kernels/include/jax_mscclpp/fifo.cuh) and turns triggers into work on the
// channel's stream (one proxy stream per destination device, shared by the channels going there, which
// keeps the number of streams below the GPU's hardware queues):
//   put    -> cudaMemcpyAsync(dst + dst_off, src + src_off, size) on the channel's stream;
//   signal -> the channel's outbound count + 1 written to the peer's inbound semaphore on the same stream
//             (cuStreamWriteValue64, or a one-thread kernel where the driver lacks it): it lands after every
//             earlier copy of the channel;
//   flush  -> cudaStreamSynchronize(channel's stream) before the FIFO tail moves past the trigger;
//   custom -> the handler registered under the trigger's id, called on the proxy thread.
// Triggers are handled strictly in FIFO order. The thread starts with the first channel or handler and stops
// (joined) when the service is destroyed.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "jax_mscclpp/fifo.cuh"
#include "memory.h"

namespace jax_mscclpp::cuda {

// Host owner of one FIFO: slots and tail in pinned mapped host memory, head and tail cache on the device.
class Fifo {
 public:
  Fifo(int device, uint32_t size);
  ~Fifo();
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;

  FifoDeviceHandle device_handle(const WaitSite& site) const;
  uint32_t size() const { return size_; }

  // Proxy side. poll: true and the trigger at the tail if that slot is full. pop: frees the slot and
  // publishes tail + 1 (release), in that order.
  bool poll(ProxyTrigger& out) const;
  void pop();
  uint64_t tail() const { return tail_value_; }

 private:
  int device_;
  uint32_t size_;
  void* host_block_ = nullptr;  // [tail (own cache line)][slots]
  uint64_t* tail_host_ = nullptr;
  ProxyTrigger* slots_host_ = nullptr;
  uint64_t* tail_dev_ = nullptr;
  ProxyTrigger* slots_dev_ = nullptr;
  DeviceBuffer head_;  // [head, tail cache]
  uint64_t tail_value_ = 0;
};

class ProxyService {
 public:
  using CustomHandler = std::function<void(const ProxyTrigger&)>;

  ProxyService(int device, uint32_t fifo_size = 1024);
  ~ProxyService();
  ProxyService(const ProxyService&) = delete;
  ProxyService& operator=(const ProxyService&) = delete;

  // The process-wide service of `device`, created on first use, destroyed when the last user lets go.
  static std::shared_ptr<ProxyService> shared(int device);
  // That service if it exists now, else null (creates nothing).
  static std::shared_ptr<ProxyService> find_shared(int device);

  // A port channel: puts copy src_base[src_off] -> dst_base[dst_off] (both < 4 GiB), signals write to
  // `remote_inbound` (the peer's semaphore word, mapped here). Returns the channel id for triggers.
  uint32_t add_channel(char* dst_base, size_t dst_bytes, const char* src_base, size_t src_bytes,
                       uint64_t* remote_inbound);
  // Completes the channel's outstanding work and forgets it.
  void remove_channel(uint32_t id);

  // Custom triggers (kTriggerCustom) carrying `id` go to `handler` on the proxy thread.
  void set_custom_handler(uint32_t id, CustomHandler handler);
  void remove_custom_handler(uint32_t id);

  FifoDeviceHandle fifo_handle(const WaitSite& site) const { return fifo_.device_handle(site); }
  int device() const { return device_; }
  uint64_t triggers_handled() const { return handled_.load(std::memory_order_acquire); }
  // First failure seen on the proxy thread (a bad trigger or a CUDA error); empty if none.
  std::string error() const;
  // How signals are written: "cuStreamWriteValue64", or "kernel" (the fallback).
  std::string signal_path() const;

  // Proxy threads running in this process (teardown checks).
  static int live_threads();
  // The longest the proxy thread spent on one trigger, the one in progress included, in seconds. A trigger takes
  // microseconds to milliseconds; seconds mean the thread is blocked in a CUDA call, e.g. behind a driver call of
  // another thread that waits for the device to go idle while a kernel waits on this proxy
  // (docs/architecture.md, "Port channels and the driver").
  double longest_trigger_seconds() const;
  // "; the proxy of device D was blocked in one CUDA call for S s ..." for every service of this process
  // whose longest trigger took at least `min_seconds`; empty if none (a timeout message's hint).
  static std::string stalled_proxies(double min_seconds);

 private:
  struct Channel {
    char* dst;
    size_t dst_bytes;
    const char* src;
    size_t src_bytes;
    uint64_t* remote_inbound;
    uint64_t outbound = 0;
    cudaStream_t stream = nullptr;  // owned by streams_
  };
  cudaStream_t stream_for(const void* dst);

  void ensure_started();
  void run();
  void handle(const ProxyTrigger& t);
  void fail(const std::string& what);
  void write_signal(Channel& ch);

  int device_;
  Fifo fifo_;
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, std::shared_ptr<Channel>> channels_;
  std::unordered_map<uint32_t, std::shared_ptr<CustomHandler>> handlers_;
  std::unordered_map<int, cudaStream_t> streams_;  // by destination device
  uint32_t next_channel_ = 0;
  std::string error_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> handled_{0};
  std::atomic<int64_t> trigger_started_ns_{0};  // steady clock; 0 between triggers
  std::atomic<int64_t> longest_trigger_ns_{0};
  std::thread thread_;
  std::atomic<bool> use_stream_write_{true};
};

}  // namespace jax_mscclpp::cuda
