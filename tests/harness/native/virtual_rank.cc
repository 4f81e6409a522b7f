#include "virtual_rank.h"

#include <chrono>
#include <stdexcept>
#include <thread>

#include "check.h"
#include "jax_mscclpp/codes.h"

namespace jax_mscclpp::cuda {

VirtualRank::VirtualRank(const RankOptions& opts, size_t input_bytes, size_t output_bytes, bool port_channels)
    : opts_(opts) {
  DeviceGuard g(opts.device);
  gpu_ = std::make_unique<GpuRank>(opts, port_channels);
  input_ = DeviceBuffer(opts.device, input_bytes);
  output_ = DeviceBuffer(opts.device, output_bytes);
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

VirtualRank::~VirtualRank() { close(); }

GpuRank& VirtualRank::gpu() const {
  if (!gpu_) throw std::runtime_error("jax_mscclpp: rank is closed");
  return *gpu_;
}

void VirtualRank::build(bool shares_gpu) {
  DeviceGuard g(opts_.device);
  gpu().finalize(codes::placement_of(shares_gpu));
  built_ = true;
  built();
}

void VirtualRank::close() {
  if (!gpu_) return;
  int previous = 0;
  JAX_MSCCLPP_CUDA_IGNORE(cudaGetDevice(&previous));
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(opts_.device));
  if (stream_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaStreamSynchronize(stream_));
  release();
  if (stream_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaStreamDestroy(stream_));
  stream_ = nullptr;
  gpu_.reset();
  input_ = DeviceBuffer();
  output_ = DeviceBuffer();
  built_ = false;
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(previous));
}

char* VirtualRank::buffer(int which, size_t offset, size_t n) const {
  const RankContext& ctx = gpu().rank_context();
  char* base = nullptr;
  size_t size = 0;
  switch (which) {
    case kInput: base = input_.get(); size = input_.bytes(); break;
    case kOutput: base = output_.get(); size = output_.bytes(); break;
    case kScratch: base = ctx.scratch(); size = ctx.scratch_bytes(); break;
    default: throw std::invalid_argument("jax_mscclpp: buffer is 0 (input), 1 (output) or 2 (scratch)");
  }
  if (offset > size || n > size - offset) throw std::out_of_range("jax_mscclpp: range outside the buffer");
  return base + offset;
}

void VirtualRank::upload(int which, size_t offset, const std::string& data) {
  char* dst = buffer(which, offset, data.size());
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(dst, data.data(), data.size(), cudaMemcpyHostToDevice, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::string VirtualRank::download(int which, size_t offset, size_t n) {
  const char* src = buffer(which, offset, n);
  std::string out(n, '\0');
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, n, cudaMemcpyDeviceToHost, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

void VirtualRank::fill(int which, int byte_value) {
  const size_t size = which == kInput    ? input_.bytes()
                      : which == kOutput ? output_.bytes()
                                         : gpu().rank_context().scratch_bytes();
  char* dst = buffer(which, 0, size);
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemsetAsync(dst, byte_value, size, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void VirtualRank::synchronize() {
  GpuRank& rank = gpu();
  DeviceGuard g(opts_.device);
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e == cudaSuccess) return;
  std::string msg = std::string("jax_mscclpp: rank ") + std::to_string(opts_.rank) + " kernel failed: " +
                    cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  // The record is written before the trap; give the host's view of it a moment to settle.
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::string rec = rank.rank_context().config().error_message();
  if (!rec.empty()) msg += "\n" + rec;
  throw std::runtime_error(msg);
}

uint64_t VirtualRank::epoch() {
  uint64_t v = 0;
  GpuRank& rank = gpu();
  DeviceGuard g(opts_.device);
  JAX_MSCCLPP_CUDA_CHECK(
      cudaMemcpyAsync(&v, rank.rank_context().epoch(), sizeof(v), cudaMemcpyDeviceToHost, stream_));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return v;
}

std::string VirtualRank::error_message() const {
  return gpu_ ? gpu_->rank_context().config().error_message() : std::string();
}

}  // namespace jax_mscclpp::cuda
