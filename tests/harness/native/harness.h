// The virtual-ranks test harness: one rank's view (RankArgs) handed to test kernels, the operations they
// implement (HarnessOp), and their raw launchers (harness_channels.cu, harness_typed.cu). Several ranks may live
// on one GPU (each on its own stream) or in different processes; kernels only see channel handles.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "collectives/collective.h"
#include "jax_mscclpp/fifo.cuh"
#include "jax_mscclpp/memory_channel.cuh"
#include "jax_mscclpp/port_channel.cuh"
#include "jax_mscclpp/switch_channel.cuh"
#include "collectives/collective.h"

namespace jax_mscclpp::cuda {

enum class HarnessOp : int32_t {
  kHbExchange = 0,       // every rank puts input[src_off, +bytes) into slot `rank` of every peer's scratch;
                         // output slot p <- peer p's data. mode 0: put, signal; 1: put_with_signal; 2: get
  kLlExchange = 1,       // same through LL packets (packet 8|16). iters > 1: in-kernel pattern, verified
  kHbEpochs = 2,         // iters rounds of put/signal/wait over double-buffered scratch, pattern verified
  kElements = 3,         // single-element write/read through channels
  kReducePut = 4,        // reduce nsrc local slices, reduce_put into the next rank's scratch
  kRelaxedBarrier = 5,   // iters all-to-all barriers; mode 0 relaxed, 1 full (with a visibility check)
  kPortExchange = 6,     // kHbExchange through PortChannels. mode 0: put, signal, flush; 1: put_with_signal;
                         // 2: put_with_signal_and_flush
  kPortFlushCheck = 7,   // put to `peer`, flush (mode 0) or not (mode 1), then count bytes not yet arrived
  kSwitchAllReduce = 8,  // SwitchChannel all-reduce of scratch[0, count). mode 0: reduce_broadcast;
                         // 1: reduce into output, then broadcast
  kReduceLocal = 9,      // output <- reduce of nsrc slices of input (slot_stride apart)
  kWaitForever = 10,     // wait on `peer`, who never answers (timeout tests). mode 0: wait, 1: LL read,
                         // 2: PortChannel wait, 3: relaxed_wait
  kCopyBench = 11,       // mode 0: put into peer scratch; 1: local copy input->output; 2: get from peer
  kPingPong = 12,        // rank 0 <-> `peer`, iters round trips of `bytes`. mode 0: LL16, 1: LL8, 2: HB
  kPortLatency = 13,     // mode 0: iters put_with_signal_and_flush (rank 0), latencies (ns) to output;
                         // 1: signal/wait ping-pong through the proxy, round trips (ns) to output
  kAllReduce1paLL = 14,  // kernels/collectives/all_reduce_1pa_ll.cu on input -> output (dtype, op, count)
  kCollective = 15,      // launch_collective (kernels/collectives/collective.h): `collective`, `algorithm`, dtype,
                         // reduce_op, count (elements per block) on input + src_off -> output + dst_off, iters
                         // calls in a row, on RankArgs::collective
  kAllReduceEpilogue = 16,  // collectives/epilogue.h on RankArgs::collective: input = [x | residual | weight
                            // (`bytes` elements)], output = [new_residual | normed], `count` elements, rows of
                            // `bytes`; mode 0 residual, 1 residual + RMSNorm (eps 1e-6)
  kPermute = 17,  // launch_permute (kernels/collectives/collective.h) on RankArgs::collective: `algorithm`, dtype,
                  // count on input + src_off -> output + dst_off, iters calls in a row; the permutation in
                  // destinations_lo / _hi
};

constexpr int kHarnessCounters = 8;

// One rank's resources, by value into every harness kernel.
struct RankArgs {
  int32_t rank;
  int32_t nranks;
  int32_t channels_per_peer;
  int32_t reserved;
  char* input;
  char* output;
  char* scratch;
  uint64_t input_bytes;
  uint64_t output_bytes;
  uint64_t scratch_bytes;
  // The primitive tests' channels: [nranks * channels_per_peer], entry p * channels_per_peer + c, reading from
  // `input` (offset-based puts); PortChannels [nranks], one per peer over `input`, null without port channels.
  // They share their semaphore words with the same (peer, index) channels of `collective`.
  const MemoryChannelDeviceHandle* mem;
  const PortChannelDeviceHandle* port;
  SwitchChannelDeviceHandle sw;  // emulated over every rank's scratch; members null above kMaxSwitchMembers ranks
  uint64_t* epoch;
  unsigned long long* counters;  // kHarnessCounters, zeroed by the host before a launch
  WaitSite site;
  CollectiveContext collective;  // the rank's context as the JAX path builds it (GpuRank): what kCollective runs on
};

struct HarnessParams {
  int32_t op = 0;
  int32_t blocks = 1;
  int32_t threads = 256;
  int32_t iters = 1;
  int32_t mode = 0;
  int32_t packet = 16;
  int32_t dtype = 0;
  int32_t reduce_op = 0;
  int32_t nsrc = 1;
  int32_t peer = 1;
  uint64_t bytes = 0;
  uint64_t count = 0;
  uint64_t src_off = 0;
  uint64_t dst_off = 0;
  uint64_t slot_stride = 0;
  int32_t collective = 0;  // kCollective: Collective code (jax_mscclpp/codes.def)
  int32_t algorithm = 0;   // kCollective, kPermute: Algorithm code
  // kPermute: byte r (r < 8 of destinations_lo, r - 8 of destinations_hi) is the rank rank r sends to, 0xff none.
  uint64_t destinations_lo = ~0ull;
  uint64_t destinations_hi = ~0ull;
};

// Launches `p.op` for one rank on `stream` (asynchronous). Returns the launch error, or
// cudaErrorInvalidValue for an unknown op / dtype.
cudaError_t launch_harness(const RankArgs& a, const HarnessParams& p, cudaStream_t stream);
// The dtype/op specialized part (kReducePut, kSwitchAllReduce, kReduceLocal, kAllReduce1paLL, kCollective,
// kAllReduceEpilogue).
cudaError_t launch_harness_typed(const RankArgs& a, const HarnessParams& p, cudaStream_t stream);

// FIFO probe: `pushers` threads push `ntriggers` custom triggers (handler id 1) in total, each payload
// (pusher, sequence); used for wrap-around and backpressure tests.
cudaError_t launch_fifo_pushers(FifoDeviceHandle fifo, uint32_t ntriggers, uint32_t pushers, cudaStream_t stream);

}  // namespace jax_mscclpp::cuda
