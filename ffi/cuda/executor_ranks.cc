#include "executor_ranks.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "check.h"
#include "executor/gate.h"

namespace jax_mscclpp::cuda {
namespace {


void raise_launch_error(cudaError_t e, const char* what) {
  if (e == cudaErrorInvalidValue)
    throw std::invalid_argument(std::string("jax_mscclpp: ") + what +
                                ": unsupported dtype, op or algorithm, or a scratch too small for one piece");
  if (e == cudaErrorNotReady)
    throw std::invalid_argument(std::string("jax_mscclpp: ") + what +
                                ": the context lacks what it needs (port channels over a scratch under 4 GiB, a "
                                "SwitchChannel)");
  JAX_MSCCLPP_CUDA_CHECK(e);
}

}  // namespace

ExecutorRank::ExecutorRank(const RankOptions& opts, size_t input_bytes, size_t output_bytes, bool port_channels)
    : opts_(opts), port_(port_channels) {
  DeviceGuard g(opts.device);
  ctx_ = std::make_unique<RankContext>(opts);
  input_ = DeviceBuffer(opts.device, input_bytes);
  output_ = DeviceBuffer(opts.device, output_bytes);
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

ExecutorRank::~ExecutorRank() { close(); }

void ExecutorRank::close() {
  if (!ctx_) return;
  int previous = 0;
  JAX_MSCCLPP_CUDA_IGNORE(cudaGetDevice(&previous));
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(opts_.device));
  if (stream_ != nullptr) {
    JAX_MSCCLPP_CUDA_IGNORE(cudaStreamSynchronize(stream_));
    JAX_MSCCLPP_CUDA_IGNORE(cudaStreamDestroy(stream_));
    stream_ = nullptr;
  }
  plan_.reset();
  mem_table_ = DeviceBuffer();
  port_table_ = DeviceBuffer();
  input_ = DeviceBuffer();
  output_ = DeviceBuffer();
  ctx_.reset();
  built_ = false;
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(previous));
}

std::string ExecutorRank::endpoint() const {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  return ctx_->endpoint();
}

void ExecutorRank::connect(int peer, const std::string& endpoint) {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  ctx_->connect(peer, endpoint);
}

void ExecutorRank::build() {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  DeviceGuard g(opts_.device);
  const int n = opts_.nranks, cpp = opts_.channels_per_peer, me = opts_.rank;
  std::vector<MemoryChannelDeviceHandle> mem(static_cast<size_t>(n) * cpp);
  std::vector<PortChannelDeviceHandle> port(port_ ? static_cast<size_t>(n) * cpp : 0);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    for (int c = 0; c < cpp; ++c) {
      mem[static_cast<size_t>(p) * cpp + c] = ctx_->memory_channel(p, c, ctx_->scratch());
      // Over the whole scratch: the executor stages port puts from input/output there.
      if (port_) port[static_cast<size_t>(p) * cpp + c] = ctx_->port_channel(p, c, ctx_->scratch(), ctx_->scratch_bytes());
    }
  }
  mem_table_ = DeviceBuffer(opts_.device, mem.size() * sizeof(mem[0]) + 16);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpy(mem_table_.get(), mem.data(), mem.size() * sizeof(mem[0]), cudaMemcpyHostToDevice));
  if (port_) {
    port_table_ = DeviceBuffer(opts_.device, port.size() * sizeof(port[0]) + 16);
    JAX_MSCCLPP_CUDA_CHECK(
        cudaMemcpy(port_table_.get(), port.data(), port.size() * sizeof(port[0]), cudaMemcpyHostToDevice));
  }
  context_ = CollectiveContext{};
  context_.rank = me;
  context_.nranks = n;
  context_.channels_per_peer = cpp;
  context_.scratch = ctx_->scratch();
  context_.scratch_bytes = ctx_->scratch_bytes();
  context_.mem = mem_table_.get<MemoryChannelDeviceHandle>();
  context_.port = port_ ? port_table_.get<PortChannelDeviceHandle>() : nullptr;
  bool all = true;
  for (int p = 0; p < n; ++p) all = all && ctx_->connected(p);
  if (all && n <= kMaxSwitchMembers) context_.sw = ctx_->switch_channel_emulated();
  context_.epoch = ctx_->epoch();
  built_ = true;
}

void ExecutorRank::set_plan(std::shared_ptr<const host::HostPlan> plan, int threads) {
  if (!built_) throw std::runtime_error("jax_mscclpp: build() the rank before binding a plan");
  DeviceGuard g(opts_.device);
  auto bound = std::make_unique<ExecutorPlan>(std::move(plan), *ctx_, context_, threads);
  if (bound->device_plan().port_channels > 0 && !port_)
    throw std::invalid_argument("jax_mscclpp: the plan uses port channels; create the ranks with port channels");
  plan_ = std::move(bound);
}

char* ExecutorRank::buffer(int which, size_t offset, size_t n) const {
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

void ExecutorRank::upload(int which, size_t offset, const std::string& data) {
  char* dst = buffer(which, offset, data.size());
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(dst, data.data(), data.size(), cudaMemcpyHostToDevice, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::string ExecutorRank::download(int which, size_t offset, size_t n) {
  const char* src = buffer(which, offset, n);
  std::string out(n, '\0');
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, n, cudaMemcpyDeviceToHost, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

void ExecutorRank::fill(int which, int byte_value) {
  const size_t size = which == kInput ? input_.bytes() : which == kOutput ? output_.bytes() : ctx_->scratch_bytes();
  char* dst = buffer(which, 0, size);
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemsetAsync(dst, byte_value, size, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void ExecutorRank::check_sizes(int32_t, int in_blocks, int out_blocks, uint64_t block_count, int32_t dtype) const {
  const uint64_t es = plan_dtype_bytes(dtype);
  if (es == 0) throw std::invalid_argument("jax_mscclpp: unknown dtype code");
  if (in_blocks * block_count * es > input_.bytes() || out_blocks * block_count * es > output_.bytes())
    throw std::out_of_range("jax_mscclpp: the call's input or output is larger than the rank's buffers");
}

void ExecutorRank::launch_plan(uint64_t block_count, int32_t dtype, int32_t op) {
  if (!plan_) throw std::runtime_error("jax_mscclpp: no plan bound");
  const DevicePlan& d = plan_->device_plan();
  check_sizes(-1, d.input_blocks, d.output_blocks, block_count, dtype);
  DeviceGuard g(opts_.device);
  raise_launch_error(jax_mscclpp::launch_plan(context_, d, input_.get(), output_.get(), block_count, dtype, op, stream_),
                     "launch_plan");
}

void ExecutorRank::launch_collective(int32_t collective, int32_t algorithm, uint64_t block_count, int32_t dtype,
                                     int32_t op) {
  if (!built_) throw std::runtime_error("jax_mscclpp: build() the rank first");
  const int n = opts_.nranks;
  const int in_blocks = collective == 2 || collective == 3 ? n : 1;   // reduce_scatter, all_to_all
  const int out_blocks = collective == 1 || collective == 3 ? n : 1;  // all_gather, all_to_all
  check_sizes(collective, in_blocks, out_blocks, block_count, dtype);
  DeviceGuard g(opts_.device);
  raise_launch_error(jax_mscclpp::launch_collective(context_, collective, algorithm, input_.get(), output_.get(),
                                                    block_count, dtype, op, stream_),
                     "launch_collective");
}

void ExecutorRank::synchronize() {
  if (!ctx_) throw std::runtime_error("jax_mscclpp: rank is closed");
  DeviceGuard g(opts_.device);
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e == cudaSuccess) return;
  std::string msg = std::string("jax_mscclpp: rank ") + std::to_string(opts_.rank) + " kernel failed: " +
                    cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the record is written before the trap
  const std::string rec = ctx_->config().error_message();
  if (!rec.empty()) msg += "\n" + rec;
  throw std::runtime_error(msg);
}

uint64_t ExecutorRank::epoch() {
  uint64_t v = 0;
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(&v, ctx_->epoch(), sizeof(v), cudaMemcpyDeviceToHost, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return v;
}

std::vector<float> time_calls(const std::vector<ExecutorRank*>& ranks, const TimedCall& call, int repeats,
                              int samples) {
  if (ranks.empty() || repeats < 1 || samples < 1) throw std::invalid_argument("jax_mscclpp: nothing to time");
  ExecutorRank& first = *ranks[0];
  DeviceGuard g(first.device());
  // [flag, expired] in mapped pinned host memory.
  uint32_t* host = nullptr;
  JAX_MSCCLPP_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), 64, cudaHostAllocMapped));
  uint32_t* dev = nullptr;
  std::vector<cudaEvent_t> events(ranks.size() + 1, nullptr);
  std::vector<float> out;
  auto cleanup = [&] {
    for (auto& e : events)
      if (e != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaEventDestroy(e));
    JAX_MSCCLPP_CUDA_IGNORE(cudaFreeHost(host));
  };
  try {
    JAX_MSCCLPP_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0));
    for (auto& e : events) JAX_MSCCLPP_CUDA_CHECK(cudaEventCreate(&e));
    for (int s = 0; s < samples; ++s) {
      volatile uint32_t* flag = host;
      flag[0] = 0;
      flag[1] = 0;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      struct Release {  // the gates open however this sample ends
        volatile uint32_t* f;
        ~Release() {
          f[0] = 1;
          std::atomic_thread_fence(std::memory_order_seq_cst);
        }
      } release{flag};
      for (ExecutorRank* r : ranks)
        JAX_MSCCLPP_CUDA_CHECK(launch_gate(dev, dev + 1, 3ull * 1000 * 1000 * 1000, r->stream()));
      JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(events[0], first.stream()));
      for (int i = 0; i < repeats; ++i)
        for (ExecutorRank* r : ranks) {
          if (call.kind == 0) {
            r->launch_plan(call.block_count, call.dtype, call.op);
          } else {
            r->launch_collective(call.collective, call.algorithm, call.block_count, call.dtype, call.op);
          }
        }
      for (size_t k = 1; k < ranks.size(); ++k) {
        JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(events[k], ranks[k]->stream()));
        JAX_MSCCLPP_CUDA_CHECK(cudaStreamWaitEvent(first.stream(), events[k], 0));
      }
      JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(events.back(), first.stream()));
      flag[0] = 1;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      for (ExecutorRank* r : ranks) r->synchronize();
      if (flag[1] != 0)
        throw std::runtime_error("jax_mscclpp: a launch gate expired (the launch queue filled up): use fewer repeats");
      float ms = 0;
      JAX_MSCCLPP_CUDA_CHECK(cudaEventElapsedTime(&ms, events[0], events.back()));
      out.push_back(ms / static_cast<float>(repeats));
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return out;
}

}  // namespace jax_mscclpp::cuda
