// A virtual rank that runs the harness kernels (harness.h): the primitive tests' channel tables (memory channels
// reading from the input buffer, one PortChannel per peer over it) built by the one table builder
// (runtime/gpu/channel_tables.h) beside the GpuRank's own, counters, CUDA-graph capture and timing events.
// Python: tests/harness/virtual_ranks.py.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>
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

  // One message of a point-to-point group over this rank's buffers: (buffer: 0 input, 1 output, -1 a null
  // pointer; offset; bytes; peer; receive).
  using P2PSpec = std::tuple<int, uint64_t, uint64_t, int, int>;
  // launch_p2p_group (kernels/collectives/collective.h) of `messages` on this rank's stream (asynchronous).
  void p2p_group(const std::vector<P2PSpec>& messages);
  // Captures `groups`, launched one after another, into a CUDA graph on this rank's stream; replay() replays it.
  void capture_p2p_groups(const std::vector<std::vector<P2PSpec>>& groups);

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
  std::vector<P2PMessage> p2p_messages(const std::vector<P2PSpec>& specs) const;
  cudaError_t launch_p2p(const std::vector<P2PMessage>& messages);
  void raise_p2p_error(cudaError_t e) const;
  void instantiate(cudaGraph_t graph);
  RankArgs args() const;

  ChannelTables tables_;
  DeviceBuffer counters_;
  cudaGraphExec_t graph_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace jax_mscclpp::cuda
