// All-pairs collectives on the HB protocol: many threads copy over peer memory with 16-byte accesses, then the
// block signals each peer (one thread per peer, after a block barrier); for large messages.
//
// all_reduce 2PA-HB and reduce_scatter (one kernel, typed):
//   1. rank r puts chunk q of its input into rank q's RS area, slot r (every q != r), and signals q;
//   2. after every peer's signal, rank r folds chunk r in rank order 0..n-1 (its own input in place of slot r;
//      every peer's data at once, one pass, one rounding) and writes the result to its output; all_reduce also
//      stores it into every peer's AG area, slot r, in the same pass, then signals;
//   3. all_reduce only: after every peer's second signal, slots q of its AG area -> output chunk q.
// all_gather and all_to_all (one kernel, untyped): rank r puts its block for q into rank q's slot r, signals,
// copies its own block while the peers' arrive, waits for every peer, copies slot q -> output block q.
// Signals and waits of a block are spread over its first n - 1 threads (one peer each), so they overlap.
//
// Blocks: block b moves part b of every chunk and uses memory channel b to every peer (so grids are at most
// channels_per_peer blocks), so the block b's of all ranks synchronize among themselves only and no block waits
// for another block of its own rank. Every block signals and waits even when its part is empty: the semaphores
// stay balanced (each signal of a launch is consumed by a wait of the same launch).
//
// Scratch reuse: data of launch e sits in HB half (e & 1). A rank writes into a peer's half for launch e + 2 only
// after completing launch e + 1, during which it waited for that peer's block b signal of launch e + 1 (phase 1
// for reduce_scatter / all_gather / all_to_all, both phases for all_reduce); the peer sent it from launch e + 1,
// so its launch e, and every read of launch e's data in its scratch, had completed.
#include "collectives/algorithms.h"

namespace jax_mscclpp::collectives {
namespace {

template <class T, class Op>
__global__ void __launch_bounds__(kHBThreads)
    all_pairs_reduce_hb_kernel(CollectiveContext c, Piece p, int32_t collective) {
  const int r = c.rank, n = c.nranks, b = blockIdx.x;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uint64_t e = launch_epoch(c);
  const bool ar = collective == kAllReduceCode;
  const Chunks ch{p, ar, ar ? round_up(ceil_div(p.len, n), 16) : round_up(p.len, 16)};
  const uint64_t rs = ScratchLayout::of(c.scratch_bytes).hb(e), ag = rs + n * ch.chunk;
  const uint64_t part = round_up(ceil_div(ch.chunk, gridDim.x), 16);

  // 1. Chunk q, part b, into peer q's RS slot r.
  for (int k = 1; k < n; ++k) {
    const int q = (r + k) % n;
    const Span s = part_of(ch.len(q), b, part);
    mem_channel(c, q, b).put_from(rs + r * ch.chunk + s.lo, ch.in(q) + s.lo, s.size(), tid, nt);
  }
  barrier_peers(c, b);

  // 2. Fold chunk r, part b, in rank order; all_reduce: store the result to my output and every peer's AG slot r.
  const Span s = part_of(ch.len(r), b, part);
  auto src = [&](int q) -> const char* {
    return q == r ? ch.in(r) + s.lo : c.scratch + rs + q * ch.chunk + s.lo;
  };
  auto dst = [&](int k) -> char* {
    return k == 0 ? ch.out(r) + s.lo : mem_channel(c, (r + k) % n, b).remote + ag + r * ch.chunk + s.lo;
  };
  fold_rank_order<T, Op>(src, n, dst, ar ? n : 1, s.size(), tid, nt);

  // 3. all_reduce: every peer's reduced chunk, part b, into my output.
  if (ar) {
    barrier_peers(c, b);
    for (int k = 1; k < n; ++k) {
      const int q = (r + k) % n;
      const Span t = part_of(ch.len(q), b, part);
      copy_bytes(ch.out(q) + t.lo, c.scratch + ag + q * ch.chunk + t.lo, t.size(), tid, nt);
    }
  }
  finish_launch(c, e);
}

__global__ void __launch_bounds__(kHBThreads) all_pairs_copy_hb_kernel(CollectiveContext c, Piece p, int32_t collective) {
  const int r = c.rank, n = c.nranks, b = blockIdx.x;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uint64_t e = launch_epoch(c);
  const bool a2a = collective == kAllToAllCode;
  const uint64_t slot = round_up(p.len, 16);
  const uint64_t base = ScratchLayout::of(c.scratch_bytes).hb(e);
  const Span s = split(p.len, b, gridDim.x, 16);
  auto src = [&](int q) { return (a2a ? p.in + q * p.in_stride : p.in) + p.lo + s.lo; };
  auto dst = [&](int q) { return p.out + q * p.out_stride + p.lo + s.lo; };

  for (int k = 1; k < n; ++k) {
    const int q = (r + k) % n;
    mem_channel(c, q, b).put_from(base + r * slot + s.lo, src(q), s.size(), tid, nt);
  }
  signal_peers(c, b);
  if (src(r) != dst(r)) copy_bytes(dst(r), src(r), s.size(), tid, nt);
  __syncthreads();  // all_to_all in place: the input blocks are read before output blocks are written
  wait_peers(c, b);
  for (int k = 1; k < n; ++k) {
    const int q = (r + k) % n;
    copy_bytes(dst(q), c.scratch + base + q * slot + s.lo, s.size(), tid, nt);
  }
  finish_launch(c, e);
}

int hb_blocks(const CollectiveContext& c, uint64_t per_rank_bytes) {
  const int cap = c.channels_per_peer < kHBMaxBlocks ? c.channels_per_peer : kHBMaxBlocks;
  return blocks_for(per_rank_bytes, 64 << 10, cap);
}

}  // namespace

uint64_t piece_cap_reduce_hb(int32_t collective, int nranks, const ScratchLayout& s) {
  // all_reduce: RS + AG areas of n chunks each, chunk = piece / n; reduce_scatter: n slots of the piece.
  if (collective == kAllReduceCode) return nranks * round_down(s.hb_half / (2 * static_cast<uint64_t>(nranks)), 16);
  return round_down(s.hb_half / static_cast<uint64_t>(nranks), 16);
}

uint64_t piece_cap_copy_hb(int nranks, const ScratchLayout& s) {
  return round_down(s.hb_half / static_cast<uint64_t>(nranks), 16);
}

cudaError_t launch_all_pairs_reduce_hb(const CollectiveContext& c, const Piece& p, int32_t collective, int32_t dtype,
                                       int32_t op, cudaStream_t stream) {
  const uint64_t chunk = collective == kAllReduceCode ? ceil_div(p.len, c.nranks) : p.len;
  const int blocks = hb_blocks(c, chunk);
  cudaError_t result = cudaErrorInvalidValue;
  dispatch_reduction(dtype, op, [&](auto t, auto o) {
    all_pairs_reduce_hb_kernel<decltype(t), decltype(o)><<<blocks, kHBThreads, 0, stream>>>(c, p, collective);
    result = cudaGetLastError();
  });
  return result;
}

cudaError_t launch_all_pairs_copy_hb(const CollectiveContext& c, const Piece& p, int32_t collective,
                                     cudaStream_t stream) {
  all_pairs_copy_hb_kernel<<<hb_blocks(c, p.len), kHBThreads, 0, stream>>>(c, p, collective);
  return cudaGetLastError();
}

}  // namespace jax_mscclpp::collectives
