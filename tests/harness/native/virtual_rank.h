// One virtual rank of the test harness: a GpuRank (runtime/gpu/communicator.h: the rank of the JAX path's GPU
// communicators, with its RankContext and its channel tables, built by the same code), an input and an output
// buffer, and a stream. Python (tests/harness) creates N of them on one GPU, or one per process, exchanges their
// endpoints as bytes, as separate processes would, then build()s them. HarnessRank (primitive and collective
// kernels) and ExecutorRank (execution plans) add what their launches need.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "communicator.h"
#include "memory.h"
#include "rank_context.h"

namespace jax_mscclpp::cuda {

class VirtualRank {
 public:
  enum Buffer { kInput = 0, kOutput = 1, kScratch = 2 };

  // port_channels: the GpuRank's channel tables get channels_per_peer PortChannels per peer over the scratch.
  VirtualRank(const RankOptions& opts, size_t input_bytes, size_t output_bytes, bool port_channels);
  virtual ~VirtualRank();
  VirtualRank(const VirtualRank&) = delete;
  VirtualRank& operator=(const VirtualRank&) = delete;

  int rank() const { return opts_.rank; }
  int nranks() const { return opts_.nranks; }
  int device() const { return opts_.device; }
  bool port_channels() const { return gpu().port_channels(); }
  uint64_t scratch_bytes() const { return gpu().rank_context().scratch_bytes(); }
  std::string endpoint() const { return gpu().endpoint(); }
  void connect(int peer, const std::string& endpoint) { gpu().connect(peer, endpoint); }
  // After every peer is connected: the GpuRank's tables (GpuRank::finalize, placed kSharedGpu where `shares_gpu`:
  // two of the communicator's ranks are on one device), then what the derived class adds.
  void build(bool shares_gpu);

  void upload(int which, size_t offset, const std::string& data);
  std::string download(int which, size_t offset, size_t n);
  void fill(int which, int byte_value);
  // Waits for this rank's stream; throws std::runtime_error naming the CUDA error and the rank's timeout record
  // when a kernel failed.
  void synchronize();
  uint64_t epoch();
  cudaStream_t stream() const { return stream_; }

  double timeout_seconds() const { return gpu().rank_context().config().timeout_seconds(); }
  void set_timeout_seconds(double s) { gpu().rank_context().config().set_timeout_seconds(s); }
  std::string error_message() const;
  // Frees everything now (also done by the destructor): the stream is drained first, then the derived class
  // frees its resources (release()), then the rank and the buffers go.
  void close();

 protected:
  virtual void built() {}
  virtual void release() {}
  // Throws once the rank is closed.
  GpuRank& gpu() const;
  bool is_built() const { return built_; }
  // [offset, offset + n) of buffer `which`; throws std::out_of_range past its end.
  char* buffer(int which, size_t offset, size_t n) const;
  char* input() const { return input_.get(); }
  char* output() const { return output_.get(); }
  size_t input_bytes() const { return input_.bytes(); }
  size_t output_bytes() const { return output_.bytes(); }

 private:
  RankOptions opts_;
  std::unique_ptr<GpuRank> gpu_;
  DeviceBuffer input_, output_;
  cudaStream_t stream_ = nullptr;
  bool built_ = false;
};

}  // namespace jax_mscclpp::cuda
