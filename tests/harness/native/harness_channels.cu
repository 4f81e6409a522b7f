// Harness kernels for the untyped primitives: MemoryChannel (HB, LL, elements, barriers), PortChannel, the
// proxy FIFO, timeouts and the benchmarks' transfer loops. One rank per launch; see harness.h.
#include "harness_kernels.cuh"

namespace jax_mscclpp::cuda {
namespace {

using namespace harness;

constexpr unsigned long long kMismatch = 0;  // counter slot: words or bytes that were wrong

// ---------------------------------------------------------------------------------------------- HB

__global__ void __launch_bounds__(1024) hb_exchange_kernel(RankArgs a, HarnessParams p) {
  const int r = a.rank, b = blockIdx.x;
  const Slice s = block_slice(p.bytes, b, gridDim.x);
  const uint64_t len = s.size();
  if (p.mode == 2) {  // get: publish into my own scratch, peers read it
    copy_bytes(a.scratch + r * p.slot_stride + p.dst_off + s.lo, a.input + p.src_off + s.lo, len, threadIdx.x,
               blockDim.x);
    barrier_all(a, b);
    for (int k = 1; k < a.nranks; ++k) {
      const int q = peer_at(a, k);
      mem(a, q, b).get_to(a.output + q * p.slot_stride + s.lo, q * p.slot_stride + p.dst_off + s.lo, len,
                          threadIdx.x, blockDim.x);
    }
    barrier_all(a, b);  // nobody rewrites its scratch while a peer may still read it
    return;
  }
  for (int k = 1; k < a.nranks; ++k) {
    const MemoryChannelDeviceHandle& ch = mem(a, peer_at(a, k), b);
    const uint64_t dst = r * p.slot_stride + p.dst_off + s.lo;
    if (p.mode == 1) {
      ch.put_with_signal(dst, p.src_off + s.lo, len);
    } else {
      ch.put(dst, p.src_off + s.lo, len, threadIdx.x, blockDim.x);
    }
  }
  if (p.mode == 0) {
    __syncthreads();
    if (threadIdx.x == 0)
      for (int k = 1; k < a.nranks; ++k) mem(a, peer_at(a, k), b).signal();
  }
  if (threadIdx.x == 0)
    for (int k = 1; k < a.nranks; ++k) mem(a, peer_at(a, k), b).wait();
  __syncthreads();
  for (int k = 1; k < a.nranks; ++k) {
    const int q = peer_at(a, k);
    copy_bytes(a.output + q * p.slot_stride + s.lo, a.scratch + q * p.slot_stride + p.dst_off + s.lo, len,
               threadIdx.x, blockDim.x);
  }
}

// iters rounds over two scratch halves: write pattern(rank, epoch), put, signal, wait, verify the peers'.
__global__ void __launch_bounds__(1024) hb_epochs_kernel(RankArgs a, HarnessParams p) {
  const int r = a.rank, n = a.nranks, b = blockIdx.x;
  const uint64_t e0 = read_epoch(a);
  const Slice s = block_slice(p.bytes, b, gridDim.x);
  const uint64_t half_bytes = n * p.slot_stride;
  unsigned long long bad = 0;
  for (int it = 0; it < p.iters; ++it) {
    const uint64_t e = e0 + it + 1;
    const uint64_t half = (e & 1) * half_bytes;
    uint32_t* stage = reinterpret_cast<uint32_t*>(a.input + s.lo);
    for (uint64_t w = threadIdx.x; w < s.size() / 4; w += blockDim.x) stage[w] = pattern(r, e, s.lo / 4 + w);
    __syncthreads();
    for (int k = 1; k < n; ++k)
      mem(a, peer_at(a, k), b).put(half + r * p.slot_stride + s.lo, s.lo, s.size(), threadIdx.x, blockDim.x);
    barrier_all(a, b);
    for (int k = 1; k < n; ++k) {
      const int q = peer_at(a, k);
      const uint32_t* got = reinterpret_cast<const uint32_t*>(a.scratch + half + q * p.slot_stride + s.lo);
      for (uint64_t w = threadIdx.x; w < s.size() / 4; w += blockDim.x) bad += got[w] != pattern(q, e, s.lo / 4 + w);
    }
    __syncthreads();
  }
  add_counter(a, kMismatch, bad);
  finish_epoch(a, e0 + p.iters);
}

// ---------------------------------------------------------------------------------------------- LL

template <class Packet>
__device__ void ll_exchange(const RankArgs& a, const HarnessParams& p) {
  constexpr uint64_t P = Packet::kPayloadBytes;
  const int r = a.rank, n = a.nranks, b = blockIdx.x;
  const uint64_t e0 = read_epoch(a);
  const uint64_t pslot = (packet_buffer_bytes<Packet>(p.bytes) + 15) / 16 * 16;
  const uint64_t half_bytes = n * pslot;
  const Slice s = block_slice(p.bytes, b, gridDim.x);
  const uint64_t pk = s.lo / P * sizeof(Packet);
  const bool verify = p.iters > 1 || p.mode == 1;
  unsigned long long bad = 0;
  for (int it = 0; it < p.iters; ++it) {
    const uint64_t e = e0 + it + 1;
    const uint32_t flag = static_cast<uint32_t>(e);
    const uint64_t half = (e & 1) * half_bytes;
    const char* src = a.input + p.src_off + s.lo;
    if (verify) {
      uint32_t* stage = reinterpret_cast<uint32_t*>(a.input + s.lo);
      for (uint64_t w = threadIdx.x; w < s.size() / 4; w += blockDim.x) stage[w] = pattern(r, e, s.lo / 4 + w);
      __syncthreads();
      src = a.input + s.lo;
    }
    for (int k = 1; k < n; ++k)
      mem(a, peer_at(a, k), b).put_packets<Packet>(half + r * pslot + pk, src, s.size(), flag, threadIdx.x, blockDim.x);
    for (int k = 1; k < n; ++k) {
      const int q = peer_at(a, k);
      mem(a, q, b).read_packets<Packet>(a.output + q * p.slot_stride + s.lo, half + q * pslot + pk, s.size(), flag,
                                        threadIdx.x, blockDim.x);
    }
    __syncthreads();
    if (verify) {
      for (int k = 1; k < n; ++k) {
        const int q = peer_at(a, k);
        const uint32_t* got = reinterpret_cast<const uint32_t*>(a.output + q * p.slot_stride + s.lo);
        for (uint64_t w = threadIdx.x; w < s.size() / 4; w += blockDim.x) bad += got[w] != pattern(q, e, s.lo / 4 + w);
      }
      __syncthreads();
    }
  }
  add_counter(a, kMismatch, bad);
  finish_epoch(a, e0 + p.iters);
}

__global__ void __launch_bounds__(1024) ll_exchange_kernel(RankArgs a, HarnessParams p) {
  if (p.packet == 8) {
    ll_exchange<LL8Packet>(a, p);
  } else {
    ll_exchange<LL16Packet>(a, p);
  }
}

// ------------------------------------------------------------------------------- elements, barriers

__device__ inline uint64_t own_word(int rank, uint64_t e) { return 0xA5A5000000000000ull ^ (e << 8) ^ rank; }
__device__ inline uint64_t pair_word(int from, int to, uint64_t e) {
  return 0x5A5A000000000000ull ^ (e << 16) ^ (static_cast<uint64_t>(from) << 8) ^ to;
}

// Thread 0 only: write my word locally and one word into each peer, signal/wait, check what arrived and read
// each peer's own word remotely.
__global__ void __launch_bounds__(1024) elements_kernel(RankArgs a, HarnessParams) {
  const uint64_t e0 = read_epoch(a);
  if (threadIdx.x == 0) {
    const int r = a.rank, n = a.nranks;
    const uint64_t e = e0 + 1;
    volatile uint64_t* mine = reinterpret_cast<volatile uint64_t*>(a.scratch);
    mine[n] = own_word(r, e);
    for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).write<uint64_t>(8 * r, pair_word(r, peer_at(a, k), e));
    for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).signal();
    for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).wait();
    unsigned long long bad = 0;
    for (int k = 1; k < n; ++k) {
      const int q = peer_at(a, k);
      bad += mine[q] != pair_word(q, r, e);
      bad += mem(a, q, 0).read<uint64_t>(8 * n) != own_word(q, e);
    }
    add_counter(a, kMismatch, bad);
    for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).signal();
    for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).wait();
  }
  finish_epoch(a, e0 + 1);
}

// iters all-to-all barriers by thread 0. mode 1 also writes a word per round into each peer (two words by
// round parity) and checks, after the full wait, that the peers' words of this round are visible.
__global__ void __launch_bounds__(1024) barrier_kernel(RankArgs a, HarnessParams p) {
  const uint64_t e0 = read_epoch(a);
  if (threadIdx.x == 0) {
    const int r = a.rank, n = a.nranks;
    volatile uint64_t* mine = reinterpret_cast<volatile uint64_t*>(a.scratch);
    unsigned long long bad = 0;
    for (int it = 0; it < p.iters; ++it) {
      if (p.mode == 1) {
        for (int k = 1; k < n; ++k)
          mem(a, peer_at(a, k), 0).write<uint64_t>(8 * (2 * r + (it & 1)), pair_word(r, it, e0));
        for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).signal();
        for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).wait();
        for (int k = 1; k < n; ++k) {
          const int q = peer_at(a, k);
          bad += mine[2 * q + (it & 1)] != pair_word(q, it, e0);
        }
      } else {
        for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).relaxed_signal();
        for (int k = 1; k < n; ++k) mem(a, peer_at(a, k), 0).relaxed_wait();
      }
    }
    add_counter(a, kMismatch, bad);
  }
  finish_epoch(a, e0 + 1);
}

// ---------------------------------------------------------------------------------------- PortChannel

__global__ void __launch_bounds__(1024) port_exchange_kernel(RankArgs a, HarnessParams p) {
  const int r = a.rank, n = a.nranks;
  if (threadIdx.x == 0) {
    for (int k = 1; k < n; ++k) {
      const PortChannelDeviceHandle& pc = a.port[peer_at(a, k)];
      const uint64_t dst = r * p.slot_stride + p.dst_off;
      if (p.mode == 0) {
        pc.put(dst, p.src_off, p.bytes);
        pc.signal();
      } else if (p.mode == 1) {
        pc.put_with_signal(dst, p.src_off, p.bytes);
      } else {
        pc.put_with_signal_and_flush(dst, p.src_off, p.bytes);
      }
    }
    if (p.mode == 0)
      for (int k = 1; k < n; ++k) a.port[peer_at(a, k)].flush();
    for (int k = 1; k < n; ++k) a.port[peer_at(a, k)].wait();
  }
  __syncthreads();
  for (int k = 1; k < n; ++k) {
    const int q = peer_at(a, k);
    copy_bytes(a.output + q * p.slot_stride, a.scratch + q * p.slot_stride + p.dst_off, p.bytes, threadIdx.x,
               blockDim.x);
  }
}

// put, then flush (mode 0) or not (mode 1), then count the bytes of the destination that differ from the
// source. With the flush the count must be 0. Ends with a flush either way, so nothing is in flight after.
__global__ void __launch_bounds__(1024) port_flush_check_kernel(RankArgs a, HarnessParams p) {
  const PortChannelDeviceHandle& pc = a.port[p.peer];
  if (threadIdx.x == 0) {
    pc.put(p.dst_off, p.src_off, p.bytes);
    if (p.mode == 0) pc.flush();
  }
  __syncthreads();
  const volatile unsigned char* dst =
      reinterpret_cast<const volatile unsigned char*>(mem(a, p.peer, 0).remote + p.dst_off);
  const unsigned char* src = reinterpret_cast<const unsigned char*>(a.input + p.src_off);
  unsigned long long bad = 0;
  for (uint64_t i = threadIdx.x; i < p.bytes; i += blockDim.x) bad += dst[i] != src[i];
  add_counter(a, kMismatch, bad);
  __syncthreads();
  if (threadIdx.x == 0) pc.flush();
}

// ------------------------------------------------------------------------------------------- timeouts

__global__ void __launch_bounds__(1024) wait_forever_kernel(RankArgs a, HarnessParams p) {
  if (threadIdx.x != 0) return;
  const uint64_t e0 = read_epoch(a);
  switch (p.mode) {
    case 0: mem(a, p.peer, 0).wait(); break;
    case 1:
      mem(a, p.peer, 0).read_packets<LL16Packet>(a.output, 0, 16, static_cast<uint32_t>(e0 + 1), 0, 1);
      break;
    case 2: a.port[p.peer].wait(); break;
    default: mem(a, p.peer, 0).relaxed_wait(); break;
  }
}

// ----------------------------------------------------------------------------------------- benchmarks

__global__ void __launch_bounds__(1024) copy_bench_kernel(RankArgs a, HarnessParams p) {
  const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x, nth = gridDim.x * blockDim.x;
  const MemoryChannelDeviceHandle& ch = mem(a, p.peer, 0);
  for (int it = 0; it < p.iters; ++it) {
    if (p.mode == 0) {
      ch.put(p.dst_off, p.src_off, p.bytes, tid, nth);
    } else if (p.mode == 1) {
      copy_bytes(a.output + p.dst_off, a.input + p.src_off, p.bytes, tid, nth);
    } else {
      ch.get_to(a.output + p.dst_off, p.src_off, p.bytes, tid, nth);
    }
  }
}

// Rank 0 and `peer`, one block each: iters round trips.
__global__ void __launch_bounds__(1024) ping_pong_kernel(RankArgs a, HarnessParams p) {
  const bool first = a.rank == 0;
  const int other = first ? p.peer : 0;
  const MemoryChannelDeviceHandle& ch = mem(a, other, 0);
  const uint64_t e0 = read_epoch(a);
  if (p.mode == 2) {
    for (int it = 0; it < p.iters; ++it) {
      if (first) {
        ch.put(0, 0, p.bytes, threadIdx.x, blockDim.x);
        __syncthreads();
        if (threadIdx.x == 0) {
          ch.signal();
          ch.wait();
        }
        __syncthreads();
      } else {
        if (threadIdx.x == 0) ch.wait();
        __syncthreads();
        ch.put(0, 0, p.bytes, threadIdx.x, blockDim.x);
        __syncthreads();
        if (threadIdx.x == 0) ch.signal();
      }
    }
  } else {
    const uint64_t half_bytes =
        (p.mode == 1 ? packet_buffer_bytes<LL8Packet>(p.bytes) : packet_buffer_bytes<LL16Packet>(p.bytes)) + 15;
    const uint64_t halfb = half_bytes / 16 * 16;
    for (int it = 0; it < p.iters; ++it) {
      const uint64_t e = e0 + it + 1;
      const uint32_t flag = static_cast<uint32_t>(e);
      const uint64_t half = (e & 1) * halfb;
      if (p.mode == 1) {
        if (first) {
          ch.put_packets<LL8Packet>(half, a.input, p.bytes, flag, threadIdx.x, blockDim.x);
          ch.read_packets<LL8Packet>(a.output, half, p.bytes, flag, threadIdx.x, blockDim.x);
        } else {
          ch.read_packets<LL8Packet>(a.output, half, p.bytes, flag, threadIdx.x, blockDim.x);
          ch.put_packets<LL8Packet>(half, a.output, p.bytes, flag, threadIdx.x, blockDim.x);
        }
      } else {
        if (first) {
          ch.put_packets<LL16Packet>(half, a.input, p.bytes, flag, threadIdx.x, blockDim.x);
          ch.read_packets<LL16Packet>(a.output, half, p.bytes, flag, threadIdx.x, blockDim.x);
        } else {
          ch.read_packets<LL16Packet>(a.output, half, p.bytes, flag, threadIdx.x, blockDim.x);
          ch.put_packets<LL16Packet>(half, a.output, p.bytes, flag, threadIdx.x, blockDim.x);
        }
      }
    }
  }
  finish_epoch(a, e0 + p.iters);
}

// Thread 0; latencies in ns into output (uint64 per iteration) on rank 0.
__global__ void __launch_bounds__(1024) port_latency_kernel(RankArgs a, HarnessParams p) {
  if (threadIdx.x != 0) return;
  const bool first = a.rank == 0;
  const PortChannelDeviceHandle& pc = a.port[first ? p.peer : 0];
  uint64_t* lat = reinterpret_cast<uint64_t*>(a.output);
  for (int it = 0; it < p.iters; ++it) {
    if (p.mode == 0) {
      if (first) {
        const uint64_t t0 = global_timer_ns();
        pc.put_with_signal_and_flush(0, 0, p.bytes);
        lat[it] = global_timer_ns() - t0;
      } else {
        pc.wait();
      }
    } else {
      if (first) {
        const uint64_t t0 = global_timer_ns();
        pc.signal();
        pc.wait();
        lat[it] = global_timer_ns() - t0;
      } else {
        pc.wait();
        pc.signal();
      }
    }
  }
}

// ----------------------------------------------------------------------------------------------- FIFO

__global__ void __launch_bounds__(1024) fifo_pushers_kernel(FifoDeviceHandle fifo, uint32_t ntriggers, uint32_t pushers) {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= pushers) return;
  uint64_t last = 0;
  bool pushed = false;
  uint32_t seq = 0;
  for (uint32_t i = t; i < ntriggers; i += pushers, ++seq) {
    last = fifo.push(make_custom_trigger(1, (static_cast<uint64_t>(t) << 32) | seq, i));
    pushed = true;
  }
  if (pushed) fifo.sync(last);
}

}  // namespace

cudaError_t launch_harness(const RankArgs& a, const HarnessParams& p, cudaStream_t stream) {
  const dim3 grid(p.blocks), block(p.threads);
  switch (static_cast<HarnessOp>(p.op)) {
    case HarnessOp::kHbExchange: hb_exchange_kernel<<<grid, block, 0, stream>>>(a, p); break;
    case HarnessOp::kLlExchange: ll_exchange_kernel<<<grid, block, 0, stream>>>(a, p); break;
    case HarnessOp::kHbEpochs: hb_epochs_kernel<<<grid, block, 0, stream>>>(a, p); break;
    case HarnessOp::kElements: elements_kernel<<<1, 32, 0, stream>>>(a, p); break;
    case HarnessOp::kRelaxedBarrier: barrier_kernel<<<1, 32, 0, stream>>>(a, p); break;
    case HarnessOp::kPortExchange: port_exchange_kernel<<<1, block, 0, stream>>>(a, p); break;
    case HarnessOp::kPortFlushCheck: port_flush_check_kernel<<<1, block, 0, stream>>>(a, p); break;
    case HarnessOp::kWaitForever: wait_forever_kernel<<<1, 32, 0, stream>>>(a, p); break;
    case HarnessOp::kCopyBench: copy_bench_kernel<<<grid, block, 0, stream>>>(a, p); break;
    case HarnessOp::kPingPong: ping_pong_kernel<<<1, block, 0, stream>>>(a, p); break;
    case HarnessOp::kPortLatency: port_latency_kernel<<<1, 32, 0, stream>>>(a, p); break;
    case HarnessOp::kReducePut:
    case HarnessOp::kSwitchAllReduce:
    case HarnessOp::kReduceLocal:
    case HarnessOp::kAllReduce1paLL:
    case HarnessOp::kCollective:
    case HarnessOp::kPermute:
    case HarnessOp::kAllReduceEpilogue: return launch_harness_typed(a, p, stream);
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_fifo_pushers(FifoDeviceHandle fifo, uint32_t ntriggers, uint32_t pushers, cudaStream_t stream) {
  const uint32_t threads = pushers < 256 ? pushers : 256;
  fifo_pushers_kernel<<<(pushers + threads - 1) / threads, threads, 0, stream>>>(fifo, ntriggers, pushers);
  return cudaGetLastError();
}

}  // namespace jax_mscclpp::cuda
