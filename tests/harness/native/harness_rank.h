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
  // The algorithm the call entry (GpuRank::run) runs for the collective call `p` over this rank's buffers
  // (collectives/collective.h, direct_algorithm): kInPlace where the ranks reach each other's buffers.
  int32_t call_algorithm(const HarnessParams& p) const;
  // Host time of the frontends' call entry (GpuRank::run) as the JAX path calls it, on XLA's buffers
  // (CollectiveCall::peers_reach_buffers) with the production grid: `rounds` rounds of `calls` calls of every rank
  // of `ranks` in turn, each round timed on the host with no synchronization inside it, then every rank's stream
  // synchronized (so the launch queue never fills: calls * ranks stays under its depth). Two rounds run untimed
  // first. Returns each round's host microseconds per rank call; throws the call's message if one is not launched.
  static std::vector<double> time_call_entry(const std::vector<HarnessRank*>& ranks, const HarnessParams& p, int calls,
                                             int rounds);
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

  // One ragged all-to-all over this rank's buffers (launch_ragged_all_to_all, kernels/collectives/collective.h):
  // (operand_offset, operand_rows, output_offset, output_rows, row_bytes, input_offsets, send_sizes,
  // output_offsets, recv_sizes, index_bytes). The operand is operand_rows rows of row_bytes at input +
  // operand_offset, the output output_rows rows at output + output_offset; the four tables (nranks entries each)
  // are written as index_bytes-wide integers (8 for any width but 4, which the launcher then refuses) into a device
  // buffer of the rank's.
  using RaggedSpec = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, std::vector<int64_t>,
                                std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>, int>;
  // The tables of one call: (input_offsets, send_sizes, output_offsets, recv_sizes).
  using RaggedTables = std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                                  std::vector<int64_t>>;
  // Launches `call` on this rank's stream (asynchronous; the host never waits for the stream): its tables are
  // written into the rank's one table buffer by a kernel on the stream just before, so a call after it may reuse
  // the buffer. Where the rank stops on failure, the kernel poisons the output should the rank have failed by its
  // end (collective.h, FailedOutputs), as GpuRank::run has it do.
  void ragged_all_to_all(const RaggedSpec& call);
  // Writes the tables of `calls` into a table buffer of the capture (one region per call), waits for them, then
  // captures the calls one after another into a CUDA graph; replay() replays it. The graph
  // reads the tables from device memory at every replay. Waits for the rank's stream first.
  void capture_ragged_all_to_all(const std::vector<RaggedSpec>& calls);
  // Rewrites the tables of the captured calls (one entry per call, in order) in the capture's table buffer, and
  // waits for the rank's stream: the next replay() moves the rows those tables say.
  void set_captured_ragged_tables(const std::vector<RaggedTables>& tables);

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
  // `call` checked and its buffers resolved; the table pointers left null (the caller's table buffer sets them).
  RaggedAllToAll ragged_call(const RaggedSpec& call) const;
  // Enqueues the writes of one call's tables at `at` (ragged_table_stride() bytes) on the rank's stream.
  void write_ragged_tables(const RaggedTables& tables, int index_bytes, char* at);
  RaggedAllToAll with_tables(RaggedAllToAll call, char* at) const;
  size_t ragged_table_stride() const;
  cudaError_t launch_ragged(const RaggedAllToAll& call);
  void raise_ragged_error(cudaError_t e) const;
  // Destroys the captured graph (and forgets the captured ragged calls).
  void drop_graph();
  void instantiate(cudaGraph_t graph);
  RankArgs args() const;

  ChannelTables tables_;
  DeviceBuffer counters_;
  DeviceBuffer ragged_tables_;           // the eager calls' tables (ragged_table_stride() bytes)
  DeviceBuffer captured_ragged_tables_;  // the captured calls' tables, one stride per call
  std::vector<int> captured_ragged_widths_;  // index_bytes of each captured ragged call (empty: none captured)
  cudaGraphExec_t graph_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace jax_mscclpp::cuda
