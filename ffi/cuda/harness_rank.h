// Host side of the virtual-ranks harness: one rank's context, buffers, stream and device channel tables.
// Python (jax_mscclpp/testing/virtual_ranks.py) creates N of them on one GPU, or one per process, exchanges
// their endpoints and launches harness operations (harness.h) on every rank before synchronizing any.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "harness.h"
#include "memory.h"
#include "proxy.h"
#include "rank_context.h"
#include "runtime_config.h"

namespace jax_mscclpp::cuda {

class HarnessRank {
 public:
  enum Buffer { kInput = 0, kOutput = 1, kScratch = 2 };

  // port_channels: one PortChannel per peer reading from the input buffer (RankArgs::port, primitive tests);
  // collective_ports: channels_per_peer PortChannels per peer reading from the scratch (RankArgs::collective_port,
  // what launch_collective's ring needs). At most one of the two (they would share semaphore words).
  HarnessRank(const RankOptions& opts, size_t buffer_bytes, bool port_channels, bool collective_ports = false);
  ~HarnessRank();
  HarnessRank(const HarnessRank&) = delete;
  HarnessRank& operator=(const HarnessRank&) = delete;

  int rank() const { return opts_.rank; }
  int nranks() const { return opts_.nranks; }
  std::string endpoint() const;
  void connect(int peer, const std::string& endpoint);
  // After every peer is connected: builds and uploads the channel tables.
  void build();

  void upload(int which, size_t offset, const std::string& data);
  std::string download(int which, size_t offset, size_t n);
  void fill(int which, int byte_value);

  // Zeroes the counters and launches `p` on this rank's stream (asynchronous).
  void launch(const HarnessParams& p);
  // Waits for this rank's stream; throws std::runtime_error naming the CUDA error and the rank's timeout
  // record when a kernel failed.
  void synchronize();
  std::vector<uint64_t> counters();
  uint64_t epoch();

  // Captures `p` (with p.iters calls inside, as launch() runs it) into a CUDA graph on this rank's stream, and
  // replays that graph `times` times (asynchronous): XLA command buffers replay launches the same way.
  void capture(const HarnessParams& p);
  void replay(int times);

  void record_start();
  void record_stop();
  float elapsed_ms();
  // Mean time of one cudaMemcpyAsync(output <- input, bytes) over `iters` on this stream, in ms.
  float time_memcpy(size_t bytes, int iters);

  double timeout_seconds() const { return ctx_->config().timeout_seconds(); }
  void set_timeout_seconds(double s) { ctx_->config().set_timeout_seconds(s); }
  std::string error_message() const { return ctx_ ? ctx_->config().error_message() : std::string(); }
  // Frees everything now (also done by the destructor).
  void close();

 private:
  char* buffer(int which, size_t offset, size_t n) const;
  void check_collective(const HarnessParams& p) const;
  void raise_launch_error(cudaError_t e) const;
  RankArgs args() const;

  RankOptions opts_;
  bool port_;
  bool collective_ports_;
  std::unique_ptr<RankContext> ctx_;
  DeviceBuffer input_;
  DeviceBuffer output_;
  DeviceBuffer counters_;
  DeviceBuffer mem_table_;
  DeviceBuffer port_table_;
  DeviceBuffer collective_port_table_;
  DeviceBuffer stream_table_;
  SwitchChannelDeviceHandle sw_{};
  cudaGraphExec_t graph_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  bool built_ = false;
};

// Wrap-around / backpressure probe of the proxy FIFO with a custom handler (handler id 1) that records every
// trigger and sleeps `sleep_us` after every `sleep_every`-th one.
struct FifoProbeResult {
  uint64_t received = 0;
  uint64_t distinct = 0;      // distinct trigger indices seen
  bool in_order = true;       // every pusher's sequence arrived as 0, 1, 2, ...
  uint64_t tail = 0;          // FIFO positions consumed
  uint64_t wraps = 0;         // times the ring wrapped
  float elapsed_ms = 0;       // kernel time (events), including the time spent blocked on a full FIFO
  std::string proxy_error;
};

class FifoProbe {
 public:
  FifoProbe(int device, uint32_t fifo_size, double timeout_s);
  ~FifoProbe();
  FifoProbeResult run(uint32_t ntriggers, uint32_t pushers, uint32_t sleep_every, uint32_t sleep_us);

 private:
  int device_;
  uint32_t fifo_size_;
  RuntimeConfigHost config_;
  std::unique_ptr<ProxyService> proxy_;
  std::mutex mu_;
  std::vector<ProxyTrigger> seen_;
  uint32_t sleep_every_ = 0;
  uint32_t sleep_us_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace jax_mscclpp::cuda
