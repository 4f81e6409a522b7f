// Wrap-around / backpressure probe of the proxy FIFO (runtime/gpu/proxy.h) with a custom handler (handler id 1)
// that records every trigger and sleeps `sleep_us` after every `sleep_every`-th one; the triggers come from
// launch_fifo_pushers (harness.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proxy.h"
#include "runtime_config.h"

namespace jax_mscclpp::cuda {

struct FifoProbeResult {
  uint64_t received = 0;
  uint64_t distinct = 0;      // distinct trigger indices seen
  bool in_order = true;       // every pusher's sequence arrived as 0, 1, 2, ...
  uint64_t tail = 0;          // FIFO positions consumed
  uint64_t wraps = 0;         // times the ring wrapped
  float elapsed_ms = 0;       // kernel time (events), including the time spent blocked on a full FIFO
  double longest_trigger_s = 0;  // ProxyService::longest_trigger_seconds after the run
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
