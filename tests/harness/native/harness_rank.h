// A virtual rank that runs the harness kernels (harness.h): the primitive tests' channel tables (memory channels
// reading from the input buffer, one PortChannel per peer over it) built by the one table builder
// (runtime/gpu/channel_tables.h) beside the GpuRank's own, counters, CUDA-graph capture and timing events.
// Python: tests/harness/virtual_ranks.py.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "channel_tables.h"
#include "harness.h"
#include "virtual_rank.h"

namespace jax_mscclpp::cuda {

class HarnessRank : public VirtualRank {
 public:
  // port_channels: PortChannels in both tables (the primitive one per peer over the input, and the GpuRank's
  // channels_per_peer per peer over the scratch, which 2PR needs).
  HarnessRank(const RankOptions& opts, size_t input_bytes, size_t output_bytes, bool port_channels);
  ~HarnessRank() override;

  // Zeroes the counters and launches `p` on this rank's stream (asynchronous).
  void launch(const HarnessParams& p);
  std::vector<uint64_t> counters();

  // Captures `p` (with p.iters calls inside, as launch() runs it) into a CUDA graph on this rank's stream, and
  // replays that graph `times` times (asynchronous): XLA command buffers replay launches the same way.
  void capture(const HarnessParams& p);
  void replay(int times);

  void record_start();
  void record_stop();
  float elapsed_ms();
  // Mean time of one cudaMemcpyAsync(output <- input, bytes) over `iters` on this stream, in ms.
  float time_memcpy(size_t bytes, int iters);

 private:
  void built() override;
  void release() override;
  void check_launch(const HarnessParams& p) const;
  void check_collective(const HarnessParams& p) const;
  void raise_launch_error(cudaError_t e) const;
  RankArgs args() const;

  ChannelTables tables_;
  DeviceBuffer counters_;
  cudaGraphExec_t graph_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace jax_mscclpp::cuda
