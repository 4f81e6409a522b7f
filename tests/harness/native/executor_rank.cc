#include "executor_rank.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "check.h"
#include "collective_types.h"
#include "launch_gate.h"

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

ExecutorRank::~ExecutorRank() { close(); }

void ExecutorRank::set_plan(std::shared_ptr<const host::HostPlan> plan, int threads) {
  if (!is_built()) throw std::runtime_error("jax_mscclpp: build() the rank before binding a plan");
  DeviceGuard g(device());
  const int64_t id = next_plan_id_++;
  gpu().bind_plan(id, std::move(plan), threads);
  plan_ = gpu().plan(id);
}

void ExecutorRank::check_sizes(int in_blocks, int out_blocks, uint64_t block_count, int32_t dtype) const {
  const uint64_t es = plan_dtype_bytes(dtype);
  if (es == 0) throw std::invalid_argument("jax_mscclpp: unknown dtype code");
  if (in_blocks * block_count * es > input_bytes() || out_blocks * block_count * es > output_bytes())
    throw std::out_of_range("jax_mscclpp: the call's input or output is larger than the rank's buffers");
}

void ExecutorRank::launch_plan(uint64_t block_count, int32_t dtype, int32_t op) {
  if (plan_ == nullptr) throw std::runtime_error("jax_mscclpp: no plan bound");
  const DevicePlan& d = plan_->device_plan();
  check_sizes(d.input_blocks, d.output_blocks, block_count, dtype);
  DeviceGuard g(device());
  raise_launch_error(jax_mscclpp::launch_plan(context(), d, input(), output(), block_count, dtype, op, stream()),
                     "launch_plan");
}

void ExecutorRank::launch_collective(int32_t collective, int32_t algorithm, uint64_t block_count, int32_t dtype,
                                     int32_t op) {
  if (!is_built()) throw std::runtime_error("jax_mscclpp: build() the rank first");
  const auto c = static_cast<Collective>(collective);
  const int n = nranks();
  const int in_blocks = c == Collective::kReduceScatter || c == Collective::kAllToAll ? n : 1;
  const int out_blocks = c == Collective::kAllGather || c == Collective::kAllToAll ? n : 1;
  check_sizes(in_blocks, out_blocks, block_count, dtype);
  DeviceGuard g(device());
  raise_launch_error(jax_mscclpp::launch_collective(context(), collective, algorithm, input(), output(), block_count,
                                                    dtype, op, stream()),
                     "launch_collective");
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
