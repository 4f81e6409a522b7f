#include "harness_rank.h"

#include <chrono>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "check.h"
#include "collective_types.h"

namespace jax_mscclpp::cuda {
// ---------------------------------------------------------------------------------------- HarnessRank

HarnessRank::HarnessRank(const RankOptions& opts, size_t buffer_bytes, bool port_channels, bool collective_ports)
    : opts_(opts), port_(port_channels), collective_ports_(collective_ports) {
  if (port_channels && collective_ports)
    throw std::invalid_argument("jax_mscclpp: port_channels and collective_ports exclude each other");
  DeviceGuard g(opts.device);
  ctx_ = std::make_unique<RankContext>(opts);
  input_ = DeviceBuffer(opts.device, buffer_bytes);
  output_ = DeviceBuffer(opts.device, buffer_bytes);
  counters_ = DeviceBuffer(opts.device, kHarnessCounters * sizeof(unsigned long long));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreate(&start_));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreate(&stop_));
}

HarnessRank::~HarnessRank() { close(); }

void HarnessRank::close() {
  if (!ctx_) return;
  int previous = 0;
  JAX_MSCCLPP_CUDA_IGNORE(cudaGetDevice(&previous));
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(opts_.device));
  if (stream_ != nullptr) {
    JAX_MSCCLPP_CUDA_IGNORE(cudaStreamSynchronize(stream_));
    JAX_MSCCLPP_CUDA_IGNORE(cudaStreamDestroy(stream_));
    stream_ = nullptr;
  }
  if (graph_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaGraphExecDestroy(graph_));
  graph_ = nullptr;
  if (start_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaEventDestroy(start_));
  if (stop_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaEventDestroy(stop_));
  start_ = stop_ = nullptr;
  mem_table_ = DeviceBuffer();
  port_table_ = DeviceBuffer();
  collective_port_table_ = DeviceBuffer();
  counters_ = DeviceBuffer();
  input_ = DeviceBuffer();
  output_ = DeviceBuffer();
  ctx_.reset();
  built_ = false;
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(previous));
}

std::string HarnessRank::endpoint() const {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  return ctx_->endpoint();
}

void HarnessRank::connect(int peer, const std::string& endpoint) {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  ctx_->connect(peer, endpoint);
}

void HarnessRank::build() {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  DeviceGuard g(opts_.device);
  const int n = opts_.nranks, c = opts_.channels_per_peer;
  std::vector<MemoryChannelDeviceHandle> mem(static_cast<size_t>(n) * c);
  for (int p = 0; p < n; ++p) {
    if (p == opts_.rank) continue;
    for (int i = 0; i < c; ++i) mem[p * c + i] = ctx_->memory_channel(p, i, input_.get());
  }
  mem_table_ = DeviceBuffer(opts_.device, mem.size() * sizeof(MemoryChannelDeviceHandle));
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(mem_table_.get(), mem.data(),
                                         mem.size() * sizeof(MemoryChannelDeviceHandle), cudaMemcpyHostToDevice,
                                         stream_));
  if (port_) {
    std::vector<PortChannelDeviceHandle> port(n);
    for (int p = 0; p < n; ++p) {
      if (p == opts_.rank) continue;
      port[p] = ctx_->port_channel(p, 0, input_.get(), input_.bytes());
    }
    port_table_ = DeviceBuffer(opts_.device, port.size() * sizeof(PortChannelDeviceHandle));
    JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(port_table_.get(), port.data(),
                                           port.size() * sizeof(PortChannelDeviceHandle), cudaMemcpyHostToDevice,
                                           stream_));
  }
  if (collective_ports_) {
    std::vector<PortChannelDeviceHandle> port(static_cast<size_t>(n) * c);
    for (int p = 0; p < n; ++p) {
      if (p == opts_.rank) continue;
      for (int i = 0; i < c; ++i) port[p * c + i] = ctx_->port_channel(p, i, ctx_->scratch(), ctx_->scratch_bytes());
    }
    collective_port_table_ = DeviceBuffer(opts_.device, port.size() * sizeof(PortChannelDeviceHandle));
    JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(collective_port_table_.get(), port.data(),
                                           port.size() * sizeof(PortChannelDeviceHandle), cudaMemcpyHostToDevice,
                                           stream_));
  }
  bool all = true;
  for (int p = 0; p < n; ++p) all = all && ctx_->connected(p);
  if (all && n <= kMaxSwitchMembers) sw_ = ctx_->switch_channel_emulated();
  if (all && opts_.stream_blocks > 0) {
    const int sb = opts_.stream_blocks, kinds = RankContext::kStreamKinds;
    std::vector<D2DSemaphoreDeviceHandle> sems(static_cast<size_t>(n) * sb * kinds);
    for (int p = 0; p < n; ++p) {
      if (p == opts_.rank) continue;
      for (int b = 0; b < sb; ++b)
        for (int k = 0; k < kinds; ++k) sems[(static_cast<size_t>(p) * sb + b) * kinds + k] = ctx_->stream_semaphore(p, b, k);
    }
    stream_table_ = DeviceBuffer(opts_.device, sems.size() * sizeof(D2DSemaphoreDeviceHandle));
    JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(stream_table_.get(), sems.data(), sems.size() * sizeof(sems[0]),
                                           cudaMemcpyHostToDevice, stream_));
  }
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  built_ = true;
}

char* HarnessRank::buffer(int which, size_t offset, size_t n) const {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  char* base = nullptr;
  size_t size = 0;
  switch (which) {
    case kInput: base = input_.get(); size = input_.bytes(); break;
    case kOutput: base = output_.get(); size = output_.bytes(); break;
    case kScratch: base = ctx_->scratch(); size = ctx_->scratch_bytes(); break;
    default: throw std::invalid_argument("jax_mscclpp: buffer is 0 (input), 1 (output) or 2 (scratch)");
  }
  if (offset > size || n > size - offset) throw std::out_of_range("jax_mscclpp: range outside the buffer");
  return base + offset;
}

void HarnessRank::upload(int which, size_t offset, const std::string& data) {
  char* dst = buffer(which, offset, data.size());
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(dst, data.data(), data.size(), cudaMemcpyHostToDevice, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::string HarnessRank::download(int which, size_t offset, size_t n) {
  const char* src = buffer(which, offset, n);
  std::string out(n, '\0');
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, n, cudaMemcpyDeviceToHost, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

void HarnessRank::fill(int which, int byte_value) {
  const size_t size = which == kInput ? input_.bytes() : which == kOutput ? output_.bytes() : ctx_->scratch_bytes();
  char* dst = buffer(which, 0, size);
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemsetAsync(dst, byte_value, size, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

RankArgs HarnessRank::args() const {
  RankArgs a{};
  a.rank = opts_.rank;
  a.nranks = opts_.nranks;
  a.channels_per_peer = opts_.channels_per_peer;
  a.input = input_.get();
  a.output = output_.get();
  a.scratch = ctx_->scratch();
  a.input_bytes = input_.bytes();
  a.output_bytes = output_.bytes();
  a.scratch_bytes = ctx_->scratch_bytes();
  a.mem = mem_table_.get<MemoryChannelDeviceHandle>();
  a.port = port_ ? port_table_.get<PortChannelDeviceHandle>() : nullptr;
  a.collective_port = collective_ports_ ? collective_port_table_.get<PortChannelDeviceHandle>() : nullptr;
  a.sw = sw_;
  a.epoch = ctx_->epoch();
  a.stream = opts_.stream_blocks > 0 ? stream_table_.get<D2DSemaphoreDeviceHandle>() : nullptr;
  a.stream_blocks = opts_.stream_blocks;
  for (int q = 0; q < opts_.nranks && q < kDirectPeers; ++q)
    a.peer_scratch[q] = ctx_->connected(q) ? ctx_->peer_scratch(q) : nullptr;
  a.counters = counters_.get<unsigned long long>();
  a.site = ctx_->site(-1);
  return a;
}

void HarnessRank::launch(const HarnessParams& p) {
  if (!built_) throw std::runtime_error("jax_mscclpp: build() the rank before launching");
  const auto op = static_cast<HarnessOp>(p.op);
  const bool needs_port =
      op == HarnessOp::kPortExchange || op == HarnessOp::kPortFlushCheck || op == HarnessOp::kPortLatency ||
      (op == HarnessOp::kWaitForever && p.mode == 2);
  if (needs_port && !port_) throw std::invalid_argument("jax_mscclpp: this rank was built without port channels");
  const bool per_block_channels = op == HarnessOp::kHbExchange || op == HarnessOp::kLlExchange ||
                                  op == HarnessOp::kHbEpochs || op == HarnessOp::kReducePut ||
                                  op == HarnessOp::kSwitchAllReduce;
  if (per_block_channels && p.blocks > opts_.channels_per_peer)
    throw std::invalid_argument("jax_mscclpp: more blocks than channels per peer");
  if (op == HarnessOp::kCollective) {
    check_collective(p);
  } else {
    // 0: the kernel picks its grid
    const bool own_grid = op == HarnessOp::kAllReduce1paLL || op == HarnessOp::kAllReduceEpilogue;
    if (p.blocks < (own_grid ? 0 : 1) || p.threads < (own_grid ? 0 : 1) || p.threads > 1024)
      throw std::invalid_argument("jax_mscclpp: bad launch shape");
  }
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(
      cudaMemsetAsync(counters_.get(), 0, kHarnessCounters * sizeof(unsigned long long), stream_));
  raise_launch_error(launch_harness(args(), p, stream_));
}

void HarnessRank::check_collective(const HarnessParams& p) const {
  const size_t esize = dtype_size(static_cast<DType>(p.dtype));
  if (esize == 0) throw std::invalid_argument("jax_mscclpp: unknown dtype code");
  const size_t block = p.count * esize, n = static_cast<size_t>(opts_.nranks);
  const auto c = static_cast<Collective>(p.collective);
  const size_t in_bytes = block * (c == Collective::kReduceScatter || c == Collective::kAllToAll ? n : 1);
  const size_t out_bytes = block * (c == Collective::kAllGather || c == Collective::kAllToAll ? n : 1);
  if (p.src_off + in_bytes > input_.bytes() || p.dst_off + out_bytes > output_.bytes())
    throw std::out_of_range("jax_mscclpp: collective input or output outside the rank's buffers");
}

void HarnessRank::raise_launch_error(cudaError_t e) const {
  if (e == cudaErrorInvalidValue)
    throw std::invalid_argument("jax_mscclpp: unknown harness op, collective, algorithm or dtype, or scratch too small");
  if (e == cudaErrorNotReady)
    throw std::invalid_argument("jax_mscclpp: the rank lacks what the algorithm needs (collective ports, SwitchChannel)");
  JAX_MSCCLPP_CUDA_CHECK(e);
}

void HarnessRank::capture(const HarnessParams& p) {
  if (!built_) throw std::runtime_error("jax_mscclpp: build() the rank before capturing");
  if (static_cast<HarnessOp>(p.op) != HarnessOp::kCollective)
    throw std::invalid_argument("jax_mscclpp: only collective launches are captured");
  check_collective(p);
  DeviceGuard g(opts_.device);
  if (graph_ != nullptr) {
    JAX_MSCCLPP_CUDA_CHECK(cudaGraphExecDestroy(graph_));
    graph_ = nullptr;
  }
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const cudaError_t launched = launch_harness(args(), p, stream_);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (launched != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    raise_launch_error(launched);
  }
  JAX_MSCCLPP_CUDA_CHECK(ended);
  const cudaError_t inst = cudaGraphInstantiate(&graph_, graph, 0);
  cudaGraphDestroy(graph);
  JAX_MSCCLPP_CUDA_CHECK(inst);
}

void HarnessRank::replay(int times) {
  if (graph_ == nullptr) throw std::runtime_error("jax_mscclpp: nothing captured");
  DeviceGuard g(opts_.device);
  for (int i = 0; i < times; ++i) JAX_MSCCLPP_CUDA_CHECK(cudaGraphLaunch(graph_, stream_));
}

void HarnessRank::synchronize() {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  DeviceGuard g(opts_.device);
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e == cudaSuccess) return;
  std::string msg = std::string("jax_mscclpp: rank ") + std::to_string(opts_.rank) + " kernel failed: " +
                    cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  // The record is written before the trap; give the host's view of it a moment to settle.
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::string rec = ctx_->config().error_message();
  if (!rec.empty()) msg += "\n" + rec;
  throw std::runtime_error(msg);
}

std::vector<uint64_t> HarnessRank::counters() {
  std::vector<uint64_t> out(kHarnessCounters);
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(out.data(), counters_.get(), out.size() * sizeof(uint64_t),
                                         cudaMemcpyDeviceToHost, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

uint64_t HarnessRank::epoch() {
  uint64_t v = 0;
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(&v, ctx_->epoch(), sizeof(v), cudaMemcpyDeviceToHost, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return v;
}

void HarnessRank::record_start() { JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(start_, stream_)); }
void HarnessRank::record_stop() { JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(stop_, stream_)); }
float HarnessRank::elapsed_ms() {
  JAX_MSCCLPP_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  JAX_MSCCLPP_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

float HarnessRank::time_memcpy(size_t bytes, int iters) {
  if (bytes > input_.bytes() || bytes > output_.bytes()) throw std::out_of_range("jax_mscclpp: size over the buffers");
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(output_.get(), input_.get(), bytes, cudaMemcpyDeviceToDevice, stream_));
  record_start();
  for (int i = 0; i < iters; ++i)
    JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(output_.get(), input_.get(), bytes, cudaMemcpyDeviceToDevice, stream_));
  record_stop();
  return elapsed_ms() / static_cast<float>(iters);
}

// ------------------------------------------------------------------------------------------ FifoProbe

FifoProbe::FifoProbe(int device, uint32_t fifo_size, double timeout_s)
    : device_(device), fifo_size_(fifo_size), config_(0, timeout_s) {
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
  return r;
}

}  // namespace jax_mscclpp::cuda
