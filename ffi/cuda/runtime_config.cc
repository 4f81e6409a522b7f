#include "runtime_config.h"

#include <atomic>
#include <cstdio>
#include <cstring>

#include "check.h"
#include "runtime_settings.h"

namespace jax_mscclpp::cuda {

namespace {

const char* op_name(uint32_t op) {
  switch (static_cast<WaitOp>(op)) {
    case WaitOp::kSemaphoreWait: return "semaphore wait (MemoryChannel::wait)";
    case WaitOp::kRelaxedSemaphoreWait: return "relaxed semaphore wait (MemoryChannel::relaxed_wait)";
    case WaitOp::kHostSemaphoreWait: return "proxy semaphore wait (PortChannel::wait)";
    case WaitOp::kPacketRead: return "LL packet read";
    case WaitOp::kFifoPush: return "proxy FIFO push (FIFO full)";
    case WaitOp::kFifoSync: return "proxy FIFO sync (flush)";
    case WaitOp::kUser: return "collective wait";
    default: return "wait";
  }
}

uint64_t to_ns(double s) { return static_cast<uint64_t>(s * 1e9); }

}  // namespace

std::string describe_error(const ErrorRecord& rec, uint64_t timeout_ns) {
  if (rec.valid == 0) return {};
  char buf[512];
  const double waited = static_cast<double>(rec.waited_ns) * 1e-9;
  const double limit = static_cast<double>(timeout_ns == 0 ? kDefaultTimeoutNs : timeout_ns) * 1e-9;
  std::string peer = rec.peer >= 0 ? "peer " + std::to_string(rec.peer) : std::string("the proxy");
  std::snprintf(buf, sizeof(buf),
                "jax_mscclpp: rank %d timed out after %.3f s (limit %.3f s, JAX_MSCCLPP_TIMEOUT_S) in %s on %s: "
                "waited for %llu (epoch/flag/position), last saw %llu [block %d, thread %d]",
                rec.rank, waited, limit, op_name(rec.op), peer.c_str(), static_cast<unsigned long long>(rec.epoch),
                static_cast<unsigned long long>(rec.observed), rec.block, rec.thread);
  return buf;
}

RuntimeConfigHost::RuntimeConfigHost(int rank, double timeout_s) : rank_(rank) {
  void* p = nullptr;
  JAX_MSCCLPP_CUDA_CHECK(cudaHostAlloc(&p, sizeof(RuntimeConfig), cudaHostAllocMapped | cudaHostAllocPortable));
  host_ = static_cast<RuntimeConfig*>(p);
  std::memset(host_, 0, sizeof(RuntimeConfig));
  void* d = nullptr;
  cudaError_t e = cudaHostGetDevicePointer(&d, p, 0);
  if (e != cudaSuccess) {
    cudaFreeHost(p);
    JAX_MSCCLPP_CUDA_CHECK(e);
  }
  device_ = static_cast<RuntimeConfig*>(d);
  set_timeout_seconds(timeout_s > 0 ? timeout_s : jax_mscclpp::timeout_seconds());
}

RuntimeConfigHost::~RuntimeConfigHost() {
  if (host_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaFreeHost(host_));
}

double RuntimeConfigHost::timeout_seconds() const {
  return static_cast<double>(reinterpret_cast<volatile uint64_t*>(&host_->timeout_ns)[0]) * 1e-9;
}

void RuntimeConfigHost::set_timeout_seconds(double s) {
  reinterpret_cast<volatile uint64_t*>(&host_->timeout_ns)[0] = to_ns(s);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool RuntimeConfigHost::has_error() const { return reinterpret_cast<volatile uint32_t*>(&host_->error.valid)[0] != 0; }

std::string RuntimeConfigHost::error_message() const {
  if (!has_error()) return {};
  std::atomic_thread_fence(std::memory_order_acquire);
  ErrorRecord rec;
  std::memcpy(&rec, const_cast<const ErrorRecord*>(&host_->error), sizeof(rec));
  return describe_error(rec, host_->timeout_ns);
}

void RuntimeConfigHost::clear_error() {
  std::memset(&host_->error, 0, sizeof(ErrorRecord));
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace jax_mscclpp::cuda
