// all_reduce 2PR: two-phase ring (reduce-scatter, then all-gather) on PortChannels: the data moves by DMA
// (cudaMemcpyAsync issued by the host proxy), GPU threads only reduce and copy.
//
// The proxy copies between registered buffers only: the port channels' local buffer is this rank's scratch, so
// the input is first staged there (XLA's buffers are not registered). Chunks: the piece is cut into n chunks;
// rank r ends the reduce-scatter with chunk r. Scratch (HB half e & 1) holds 2n - 1 chunk slots:
//   slot 0          staging: my input chunk r - 1, the first thing I send;
//   slot 1 + s      RS step s (s = 0..n-2): the partial of chunk r - 2 - s from my predecessor, which I fold with
//                   my input in place and send on (at step n - 2 it is chunk r, complete: my output chunk r, and
//                   the first thing I send in the all-gather);
//   slot n + t      AG step t (t = 0..n-2): complete chunk r - 1 - t from my predecessor, copied to my output and
//                   (t < n - 2) sent on.
// Overlap: every (chunk, block) part over 256 KiB is cut in two halves with a signal each; the DMA of one half
// runs while the block waits for and reduces the other, and the successor starts on the first half while the
// second is still in flight.
//
// Order: chunk c is folded along the ring, starting with rank c + 1's input and ending with rank c's, each hop
// rounding to the element type (f16/bf16 partials are stored as such). One rank produces each chunk and the
// all-gather copies it, so every rank gets the same bits; they differ from the all-pairs algorithms' rank-order
// fold by rounding.
//
// Blocks: block b runs its own ring over part b of every chunk on port channel b (to the successor; it waits on
// the one from the predecessor), so blocks never wait for each other. Signals of a port channel arrive in the
// order they were pushed, each after its data; both ends skip the same empty halves, so each wait is matched by
// the signal of the same step. Each launch consumes every signal it sends.
//
// Scratch reuse: a rank starting launch e + 2 has completed launch e + 1, whose all-gather brought it chunk c
// completed by rank c for every c, so every rank had started launch e + 1: every launch-e kernel had ended. A
// rank's launch-e kernel ends only after waiting for every launch-e signal its predecessor sent, and each signal
// follows its copy on the proxy stream; so launch e's copies out of every slot and into every slot of half
// (e & 1) have landed before any launch e + 2 writes there (staging copy, in-place fold or a new DMA).
#include "collectives/algorithms.h"

namespace jax_mscclpp::collectives {
namespace {

constexpr uint64_t kRingSplitMin = 256 << 10;
constexpr uint64_t kRingBytesPerBlock = 4 << 20;  // few, large proxy triggers: the proxy thread is the bottleneck

template <class T, class Op>
__global__ void __launch_bounds__(kHBThreads) all_reduce_ring_kernel(CollectiveContext c, Piece p) {
  const int r = c.rank, n = c.nranks, b = blockIdx.x;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uint64_t e = begin_launch(c);
  const Chunks ch{p, true, round_up(ceil_div(p.len, n), 16)};
  const uint64_t base = ScratchLayout::of(c.scratch_bytes).hb(e);
  const uint64_t part = round_up(ceil_div(ch.chunk, gridDim.x), 16);
  // Parts up to kRingSplitMin travel whole: the proxy's cost per trigger outweighs the overlap there.
  const uint64_t half = part <= kRingSplitMin ? part : round_up(ceil_div(part, 2), 16);
  const PortChannelDeviceHandle& to = port_channel(c, (r + 1) % n, b);
  const PortChannelDeviceHandle& from = port_channel(c, (r + n - 1) % n, b);
  auto slot = [&](int i) { return base + i * ch.chunk; };
  // Half j of part b of chunk q, as offsets within the chunk.
  auto sub = [&](int q, int j) {
    const Span s = part_of(ch.len(q), b, part);
    const Span h = part_of(s.size(), j, half);
    return Span{s.lo + h.lo, s.lo + h.hi};
  };
  auto wrap = [&](int q) { return ((q % n) + n) % n; };

  // RS step 0: stage my input chunk r - 1 and send it.
  {
    const int q = wrap(r - 1);
    for (int j = 0; j < 2; ++j) {
      const Span u = sub(q, j);
      if (u.size() == 0) continue;
      copy_bytes(c.scratch + slot(0) + u.lo, ch.in(q) + u.lo, u.size(), tid, nt);
      __syncthreads();
      if (tid == 0) to.put_with_signal(slot(1) + u.lo, slot(0) + u.lo, u.size());
    }
  }

  // RS steps: receive the partial of chunk r - 2 - s, fold my input into it, send it on.
  for (int s = 0; s <= n - 2; ++s) {
    const int q = wrap(r - 2 - s);
    const bool last = s == n - 2;  // q == r: the chunk is complete
    for (int j = 0; j < 2; ++j) {
      const Span u = sub(q, j);
      if (u.size() == 0) continue;
      if (tid == 0) from.wait();
      __syncthreads();
      char* acc = c.scratch + slot(1 + s) + u.lo;
      const char* mine = ch.in(q) + u.lo;
      char* out = ch.out(q) + u.lo;
      auto src = [&](int i) -> const char* { return i == 0 ? acc : mine; };
      auto dst = [&](int k) -> char* { return k == 0 ? acc : out; };
      fold_rank_order<T, Op, 2>(src, 2, dst, last ? 2 : 1, u.size(), tid, nt);
      __syncthreads();
      if (tid == 0) to.put_with_signal((last ? slot(n) : slot(2 + s)) + u.lo, slot(1 + s) + u.lo, u.size());
    }
  }

  // AG steps: receive complete chunk r - 1 - t, copy it out, send it on (the successor already has the last).
  for (int t = 0; t <= n - 2; ++t) {
    const int q = wrap(r - 1 - t);
    for (int j = 0; j < 2; ++j) {
      const Span u = sub(q, j);
      if (u.size() == 0) continue;
      if (tid == 0) {
        from.wait();
        if (t < n - 2) to.put_with_signal(slot(n + t + 1) + u.lo, slot(n + t) + u.lo, u.size());
      }
      __syncthreads();
      copy_bytes(ch.out(q) + u.lo, c.scratch + slot(n + t) + u.lo, u.size(), tid, nt);
    }
  }
  finish_launch(c, e);
}

uint64_t piece_cap(int32_t, int nranks, uint64_t, uint64_t scratch_bytes, const StreamTuning&) {
  const ScratchLayout s = ScratchLayout::of(scratch_bytes);
  // Port-channel offsets travel as 32 bits: the whole scratch must lie below 4 GiB.
  if (2 * (s.ll_half + s.hb_half) > (1ull << 32)) return 0;
  return nranks * round_down(s.hb_half / (2 * static_cast<uint64_t>(nranks) - 1), 16);
}

cudaError_t ready(const CollectiveContext& c, uint64_t) { return c.port == nullptr ? cudaErrorNotReady : cudaSuccess; }

cudaError_t launch(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const int cap = c.channels_per_peer < kRingMaxBlocks ? c.channels_per_peer : kRingMaxBlocks;
  const int blocks = blocks_for(ceil_div(p.len, c.nranks), kRingBytesPerBlock, cap);
  return launch_reduction(a.dtype, a.op, [&](auto t, auto o) {
    all_reduce_ring_kernel<decltype(t), decltype(o)><<<blocks, kHBThreads, 0, stream>>>(c, p);
    return cudaSuccess;
  });
}

}  // namespace

JAX_MSCCLPP_LAUNCHER(kTwoPhaseRing) {
  static constexpr Launcher kLauncher{piece_cap, ready, launch};
  return call.collective == codes::kAllReduce ? &kLauncher : nullptr;
}

}  // namespace jax_mscclpp::collectives
