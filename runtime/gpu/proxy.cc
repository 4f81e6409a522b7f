#include "proxy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

#include "check.h"
#include "driver_api.h"
#include "stream_ops.h"

namespace jax_mscclpp::cuda {
namespace {

std::atomic<int> g_live_threads{0};

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}


constexpr size_t kTailBytes = 64;  // the tail sits alone in its cache line, before the slots

}  // namespace

// ---------------------------------------------------------------------------------------------- Fifo

Fifo::Fifo(int device, uint32_t size) : device_(device), size_(size) {
  if (size == 0) throw std::invalid_argument("jax_mscclpp: FIFO size must be positive");
  DeviceGuard g(device);
  const size_t bytes = kTailBytes + static_cast<size_t>(size) * sizeof(ProxyTrigger);
  JAX_MSCCLPP_CUDA_CHECK(cudaHostAlloc(&host_block_, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(host_block_, 0, bytes);
  tail_host_ = static_cast<uint64_t*>(host_block_);
  slots_host_ = reinterpret_cast<ProxyTrigger*>(static_cast<char*>(host_block_) + kTailBytes);
  void* dev = nullptr;
  cudaError_t e = cudaHostGetDevicePointer(&dev, host_block_, 0);
  if (e != cudaSuccess) {
    cudaFreeHost(host_block_);
    JAX_MSCCLPP_CUDA_CHECK(e);
  }
  tail_dev_ = static_cast<uint64_t*>(dev);
  slots_dev_ = reinterpret_cast<ProxyTrigger*>(static_cast<char*>(dev) + kTailBytes);
  head_ = DeviceBuffer(device, 2 * sizeof(uint64_t));
}

Fifo::~Fifo() {
  if (host_block_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaFreeHost(host_block_));
}

FifoDeviceHandle Fifo::device_handle(const WaitSite& site) const {
  FifoDeviceHandle h;
  h.slots = slots_dev_;
  h.tail = tail_dev_;
  h.head = head_.get<uint64_t>();
  h.tail_cache = head_.get<uint64_t>() + 1;
  h.size = size_;
  h.site = site;
  return h;
}

bool Fifo::poll(ProxyTrigger& out) const {
  ProxyTrigger* slot = &slots_host_[tail_value_ % size_];
  const uint64_t snd = __atomic_load_n(&slot->snd, __ATOMIC_ACQUIRE);
  if (snd == 0) return false;
  // The device wrote fst, fenced, then snd: fst is visible once snd is.
  out.fst = __atomic_load_n(&slot->fst, __ATOMIC_RELAXED);
  out.snd = snd;
  return true;
}

void Fifo::pop() {
  ProxyTrigger* slot = &slots_host_[tail_value_ % size_];
  __atomic_store_n(&slot->fst, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&slot->snd, 0, __ATOMIC_RELAXED);
  ++tail_value_;
  // Release: a pusher that reads the new tail finds the slot already cleared.
  __atomic_store_n(tail_host_, tail_value_, __ATOMIC_RELEASE);
}

// -------------------------------------------------------------------------------------- ProxyService

ProxyService::ProxyService(int device, uint32_t fifo_size) : device_(device), fifo_(device, fifo_size) {}

ProxyService::~ProxyService() {
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_release);
    thread_.join();
    g_live_threads.fetch_sub(1);
  }
  int previous = 0;
  JAX_MSCCLPP_CUDA_IGNORE(cudaGetDevice(&previous));
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(device_));
  channels_.clear();
  for (auto& [dev, stream] : streams_) {
    JAX_MSCCLPP_CUDA_IGNORE(cudaStreamSynchronize(stream));
    JAX_MSCCLPP_CUDA_IGNORE(cudaStreamDestroy(stream));
  }
  streams_.clear();
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(previous));
}

cudaStream_t ProxyService::stream_for(const void* dst) {
  int dst_device = -1;
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, dst) == cudaSuccess) {
    dst_device = attr.device;
  } else {
    (void)cudaGetLastError();
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(dst_device);
  if (it != streams_.end()) return it->second;
  DeviceGuard g(device_);
  cudaStream_t s = nullptr;
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  streams_[dst_device] = s;
  return s;
}

namespace {
std::mutex g_shared_mu;
std::map<int, std::weak_ptr<ProxyService>> g_shared;
}  // namespace

std::shared_ptr<ProxyService> ProxyService::shared(int device) {
  std::lock_guard<std::mutex> lock(g_shared_mu);
  auto& weak = g_shared[device];
  if (auto s = weak.lock()) return s;
  auto s = std::make_shared<ProxyService>(device);
  weak = s;
  return s;
}

std::shared_ptr<ProxyService> ProxyService::find_shared(int device) {
  std::lock_guard<std::mutex> lock(g_shared_mu);
  auto it = g_shared.find(device);
  return it == g_shared.end() ? nullptr : it->second.lock();
}

std::string ProxyService::signal_path() const {
  if (!use_stream_write_.load(std::memory_order_relaxed) || driver_api().stream_write_value64 == nullptr)
    return "kernel";
  return "cuStreamWriteValue64";
}

int ProxyService::live_threads() { return g_live_threads.load(); }

double ProxyService::longest_trigger_seconds() const {
  const int64_t started = trigger_started_ns_.load(std::memory_order_relaxed);
  const int64_t now = started != 0 ? steady_ns() - started : 0;
  return static_cast<double>(std::max(now, longest_trigger_ns_.load(std::memory_order_relaxed))) * 1e-9;
}

std::string ProxyService::stalled_proxies(double min_seconds) {
  std::string out;
  std::lock_guard<std::mutex> lock(g_shared_mu);
  for (const auto& [device, weak] : g_shared) {
    const auto service = weak.lock();
    if (!service) continue;
    const double s = service->longest_trigger_seconds();
    if (s < min_seconds) continue;
    char buf[320];
    std::snprintf(buf, sizeof(buf),
                  "; the proxy of device %d was blocked in one CUDA call for %.1f s: the driver was waiting for a "
                  "device to go idle (e.g. loading another program's module at its first run) while a kernel "
                  "waited on the proxy (docs/architecture.md, \"Port channels and the driver\")",
                  device, s);
    out += buf;
  }
  return out;
}

uint32_t ProxyService::add_channel(char* dst_base, size_t dst_bytes, const char* src_base, size_t src_bytes,
                                   uint64_t* remote_inbound) {
  constexpr size_t kLimit = size_t{1} << 32;
  if (dst_bytes > kLimit || src_bytes > kLimit)
    throw std::invalid_argument("jax_mscclpp: port channel buffers must be at most 4 GiB (32-bit trigger offsets)");
  auto ch = std::make_shared<Channel>();
  ch->dst = dst_base;
  ch->dst_bytes = dst_bytes;
  ch->src = src_base;
  ch->src_bytes = src_bytes;
  ch->remote_inbound = remote_inbound;
  ch->stream = stream_for(dst_base);
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (next_channel_ >= kMaxTriggerChannels) throw std::runtime_error("jax_mscclpp: too many port channels");
    id = next_channel_++;
    channels_[id] = ch;
  }
  ensure_started();
  return id;
}

void ProxyService::remove_channel(uint32_t id) {
  std::shared_ptr<Channel> ch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = channels_.find(id);
    if (it == channels_.end()) return;
    ch = it->second;
    channels_.erase(it);
  }
  // The proxy thread looks channels up under mu_ and handles one trigger at a time; a channel is removed
  // only after its kernels finished, so no trigger for it is in flight once the FIFO has drained.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  uint64_t head = 0;
  for (;;) {
    DeviceGuard g(device_);
    if (cudaMemcpy(&head, fifo_handle({}).head, sizeof(head), cudaMemcpyDeviceToHost) != cudaSuccess) {
      (void)cudaGetLastError();
      break;
    }
    if (__atomic_load_n(&head, __ATOMIC_RELAXED) <= handled_.load(std::memory_order_acquire)) break;
    if (!thread_.joinable() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  int previous = 0;
  JAX_MSCCLPP_CUDA_IGNORE(cudaGetDevice(&previous));
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(device_));
  JAX_MSCCLPP_CUDA_IGNORE(cudaStreamSynchronize(ch->stream));  // the stream stays: other channels may use it
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(previous));
}

void ProxyService::set_custom_handler(uint32_t id, CustomHandler handler) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    handlers_[id] = std::make_shared<CustomHandler>(std::move(handler));
  }
  ensure_started();
}

void ProxyService::remove_custom_handler(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  handlers_.erase(id);
}

std::string ProxyService::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void ProxyService::fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.empty()) error_ = what;
}

void ProxyService::ensure_started() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stop_.store(false, std::memory_order_release);
  thread_ = std::thread([this] { run(); });
  g_live_threads.fetch_add(1);
}

void ProxyService::run() {
  if (cudaSetDevice(device_) != cudaSuccess) {
    fail("jax_mscclpp proxy: cudaSetDevice failed");
    return;
  }
  uint32_t idle = 0;
  ProxyTrigger t;
  while (!stop_.load(std::memory_order_acquire)) {
    if (!fifo_.poll(t)) {
      if (++idle < 4096) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
      continue;
    }
    idle = 0;
    const int64_t started = steady_ns();
    trigger_started_ns_.store(started, std::memory_order_relaxed);
    handle(t);
    const int64_t took = steady_ns() - started;
    trigger_started_ns_.store(0, std::memory_order_relaxed);
    if (took > longest_trigger_ns_.load(std::memory_order_relaxed))
      longest_trigger_ns_.store(took, std::memory_order_relaxed);
    fifo_.pop();
    handled_.fetch_add(1, std::memory_order_release);
  }
}

void ProxyService::write_signal(Channel& ch) {
  ++ch.outbound;
  const DriverApi& api = driver_api();
  if (use_stream_write_.load(std::memory_order_relaxed) && api.stream_write_value64 != nullptr) {
    // Default flags: the write waits for the stream's earlier work and is preceded by a system fence.
    const CUresult r = api.stream_write_value64(reinterpret_cast<CUstream>(ch.stream),
                                                reinterpret_cast<CUdeviceptr>(ch.remote_inbound), ch.outbound, 0);
    if (r == CUDA_SUCCESS) return;
    use_stream_write_.store(false);  // e.g. stream memory operations unsupported: the kernel from now on
  }
  const cudaError_t e = launch_write_value64(ch.stream, ch.remote_inbound, ch.outbound);
  if (e != cudaSuccess) fail(std::string("jax_mscclpp proxy: signal write failed: ") + cudaGetErrorString(e));
}

void ProxyService::handle(const ProxyTrigger& t) {
  const uint32_t type = trigger_type(t);
  const uint32_t id = trigger_channel(t);
  if (type & kTriggerCustom) {
    std::shared_ptr<CustomHandler> h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = handlers_.find(id);
      if (it != handlers_.end()) h = it->second;
    }
    if (h) {
      (*h)(t);
    } else {
      fail("jax_mscclpp proxy: custom trigger for unregistered handler " + std::to_string(id));
    }
    return;
  }
  std::shared_ptr<Channel> ch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = channels_.find(id);
    if (it != channels_.end()) ch = it->second;
  }
  if (!ch) {
    fail("jax_mscclpp proxy: trigger for unknown port channel " + std::to_string(id));
    return;
  }
  if (type & kTriggerPut) {
    const uint64_t size = trigger_size(t), src = trigger_src_offset(t), dst = trigger_dst_offset(t);
    if (src + size > ch->src_bytes || dst + size > ch->dst_bytes) {
      fail("jax_mscclpp proxy: put out of range on port channel " + std::to_string(id));
    } else if (size > 0) {
      const cudaError_t e = cudaMemcpyAsync(ch->dst + dst, ch->src + src, size, cudaMemcpyDeviceToDevice, ch->stream);
      if (e != cudaSuccess) fail(std::string("jax_mscclpp proxy: cudaMemcpyAsync failed: ") + cudaGetErrorString(e));
    }
  }
  if (type & kTriggerSignal) write_signal(*ch);
  if (type & kTriggerFlush) {
    // Poll rather than block: a blocking synchronize may sleep and wake late, which the device's flush pays.
    cudaError_t e;
    while ((e = cudaStreamQuery(ch->stream)) == cudaErrorNotReady) cpu_relax();
    if (e != cudaSuccess) fail(std::string("jax_mscclpp proxy: flush failed: ") + cudaGetErrorString(e));
  }
}

}  // namespace jax_mscclpp::cuda
