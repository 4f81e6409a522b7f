// All-pairs collectives on the streaming HB protocol (stream.cuh): for large messages. One launch moves the
// whole message through a bounded scratch. A block whose part is several chunks runs two groups of threads:
// senders stream the block's chunks into the peers' slots (waiting only for slot credits), receivers fold or copy
// every chunk as it arrives and hand its slot back, so puts and local work overlap. A block whose part is one
// chunk puts it with all its threads, then folds or copies with all of them: one hop, nothing to overlap.
//
//   reduce kernel (typed):  rank r sends segment q of its input to peer q and folds segment r of every rank in
//                           rank order 0..n-1 (its own input in place of its slot) into its output. all_reduce
//                           1PA-HB: every segment is the whole input (one-shot push); reduce_scatter: segment q is
//                           input block q.
//   copy kernel (untyped):  rank r sends segment q of its input (all_gather: its input; all_to_all: block q) to
//                           peer q and copies what peer q sent into output block q; its own block is copied
//                           locally.
//   two-phase kernel:       all_reduce 2PA-HB: the reduce over shards (segment q is shard q of the input, folded
//                           into shard r of the output), then the copy of shard r of the output to every peer.
//
// When the output overlaps the input (in == out for all_reduce and all_to_all), receivers write chunk k only after
// the senders have read chunk k of every segment (`sent`, in shared memory). That wait cannot close a cycle: the
// senders' chunk k needs the peer's receivers at chunk k - S, which need the peer's senders at k - S, which need
// these receivers at k - 2S, already past.
#include "collectives/algorithms.h"
#include "collectives/stream.cuh"

namespace jax_mscclpp::collectives {
namespace {

constexpr uint32_t kSenderThreads = kHBThreads / 2;

// Whether [a, a + na) and [b, b + nb) share a byte.
__device__ inline bool overlaps(const char* a, uint64_t na, const char* b, uint64_t nb) {
  return a < b + nb && b < a + na;
}

template <bool kReduce, class Work>
__device__ inline void stream_block(const StreamBlock& sb, bool alias, Work work) {
  if (sb.chunks <= 1) {
    // At most one chunk: nothing to overlap, so every thread of the block puts it, then every thread waits for the
    // peers' and works (the same signals as the two groups would give: one per chunk, no credit).
    const Group g{0, kHBThreads, 1};
    if (sb.chunks == 1) {
      sb.send<kReduce>(g, 0);
      sb.receive(g, 0);
      work(g, 0);
    }
    return;
  }
  __shared__ uint32_t sent;
  if (threadIdx.x == 0) sent = 0;
  __syncthreads();
  if (threadIdx.x < kSenderThreads) {
    const Group g{0, kSenderThreads, 1};
    for (uint32_t k = 0; k < sb.chunks; ++k) {
      sb.send<kReduce>(g, k);
      if (alias && g.tid() == 0) *reinterpret_cast<volatile uint32_t*>(&sent) = k + 1;
    }
  } else {
    const Group g{kSenderThreads, kHBThreads - kSenderThreads, 2};
    for (uint32_t k = 0; k < sb.chunks; ++k) {
      sb.receive(g, k);
      if (alias)
        while (*reinterpret_cast<volatile uint32_t*>(&sent) <= k) {
        }
      work(g, k);
      sb.release(g, k);
    }
  }
}

// One block's part of a reduce launch (see the file comment).
template <class T, class Op>
__device__ inline void stream_reduce(const CollectiveContext& c, const StreamArgs& a, uint64_t e) {
  const StreamBlock sb(c, a, e);
  const int r = sb.r;
  const uint64_t len = a.seg_len(r);
  const char* mine = a.src + r * a.src_stride;
  const bool aligned = ((reinterpret_cast<uintptr_t>(mine) | reinterpret_cast<uintptr_t>(a.dst)) & 15) == 0;
  const uint64_t span = a.src_stride != 0 ? c.nranks * a.src_stride : a.seg;
  const bool alias = overlaps(a.src, span, a.dst, len);
  stream_block<true>(sb, alias, [&](const Group& g, uint32_t k) {
    const Span s = sb.chunk_of(k, len);
    auto src = [&](int q) -> const char* { return q == r ? mine + s.lo : sb.slot(q, k); };
    if (aligned) {
      fold_aligned<T, Op>(src, sb.n, a.dst + s.lo, s.size(), g.tid(), g.count);
    } else {
      auto dst = [&](int) -> char* { return a.dst + s.lo; };
      fold_rank_order<T, Op>(src, sb.n, dst, 1, s.size(), g.tid(), g.count);
    }
  });
}

// One block's part of a copy launch.
__device__ inline void stream_copy(const CollectiveContext& c, const StreamArgs& a, uint64_t e) {
  const StreamBlock sb(c, a, e);
  const int r = sb.r, n = sb.n;
  const char* mine = a.src + r * a.src_stride;
  char* own = a.dst + r * a.dst_stride;
  const uint64_t span = a.src_stride != 0 ? n * a.src_stride : a.seg;
  const bool alias = overlaps(a.src, span, a.dst, n * a.dst_stride);
  stream_block<false>(sb, alias, [&](const Group& g, uint32_t k) {
    // Every peer's slot into its output block, and the rank's own block where it is not in place (small chunks:
    // all at once, copy_jobs).
    copy_jobs(n - 1 + (mine != own), a.geo.chunk, [&](int i) {
      if (i == n - 1) {
        const Span s = sb.chunk_of(k, a.seg_len(r));
        return CopyJob{own + s.lo, mine + s.lo, s.size()};
      }
      const int q = sb.peer(i);
      const Span s = sb.chunk_of(k, a.seg_len(q));
      return CopyJob{a.dst + q * a.dst_stride + s.lo, sb.slot(q, k), s.size()};
    }, g.tid(), g.count);
  });
}

template <class T, class Op>
__global__ void __launch_bounds__(kHBThreads) stream_reduce_kernel(CollectiveContext c, StreamArgs a) {
  const uint64_t e = begin_launch(c);
  stream_reduce<T, Op>(c, a, e);
  finish_launch(c, e);
}

__global__ void __launch_bounds__(kHBThreads) stream_copy_kernel(CollectiveContext c, StreamArgs a) {
  const uint64_t e = begin_launch(c);
  stream_copy(c, a, e);
  finish_launch(c, e);
}

// all_reduce 2PA-HB in one launch: the reduce-scatter into shard r of the output, then (after a block barrier:
// the block's own folded chunks are what it sends next) the all-gather of that shard, each phase in its own
// slots (slot_base) and on the same semaphores. Both phases cut the same shard into the same chunks, so each moves
// the same number of signals of each kind, and a phase's waits are met by that phase's signals: peer q's signals to
// this block come from one thread, in program order, its second-phase ones only after its first phase ended (the
// barrier), so a first-phase wait for q's chunk k (a count of at most the first phase's chunks) is met by q's
// chunk-k signal or later ones, each of which releases q's first-phase data too (the fence before a signal covers
// the whole block's earlier stores); and a second-phase count starts where the first phase's ended.
template <class T, class Op>
__global__ void __launch_bounds__(kHBThreads)
    stream_two_phase_kernel(CollectiveContext c, StreamArgs reduce, StreamArgs gather) {
  const uint64_t e = begin_launch(c);
  stream_reduce<T, Op>(c, reduce, e);
  __syncthreads();
  stream_copy(c, gather, e);
  finish_launch(c, e);
}

// The segment and geometry of a streaming call of `bytes` per block. 2PA-HB streams shards (a 1/n of the message
// each) and gives each of its two phases half of the HB half's slots; the others stream whole blocks through all
// of them.
struct StreamShape {
  uint64_t seg;
  uint64_t phase_bytes;  // slot bytes of one phase (the second phase's slots start there)
  StreamGeometry geo;
};

StreamShape stream_shape(bool two_phase, uint64_t bytes, int nranks, uint64_t scratch_bytes, int max_blocks,
                         const StreamTuning& tuning) {
  const uint64_t seg = two_phase ? round_up(ceil_div(bytes, nranks), 16) : bytes;
  const uint64_t phase = ScratchLayout::of(scratch_bytes).hb_half / (two_phase ? 2 : 1);
  return {seg, phase, stream_geometry(seg, nranks, phase, max_blocks, tuning)};
}

// One launch whatever the size: the piece is the whole block, or nothing when the geometry does not fit.
template <bool kTwoPhase>
uint64_t piece_cap(int32_t, int nranks, uint64_t block_bytes, uint64_t scratch_bytes, const StreamTuning& tuning) {
  return stream_shape(kTwoPhase, block_bytes, nranks, scratch_bytes, 1, tuning).geo.blocks == 0 ? 0 : block_bytes;
}

cudaError_t ready(const CollectiveContext& c, uint64_t) {
  return c.stream == nullptr || c.stream_blocks < 1 ? cudaErrorNotReady : cudaSuccess;
}

// The call's shape on this context: its grid capped by the stream blocks and `max_blocks`.
StreamShape shape_here(const CollectiveContext& c, bool two_phase, uint64_t bytes, const LaunchArgs& a) {
  const int blocks = a.max_blocks > 0 && a.max_blocks < c.stream_blocks ? a.max_blocks : c.stream_blocks;
  return stream_shape(two_phase, bytes, c.nranks, c.scratch_bytes, blocks, c.stream_tuning);
}

// all_reduce 1PA-HB (every segment the whole input: in_stride 0) and reduce_scatter (segment q = input block q).
cudaError_t launch_reduce(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const StreamShape s = shape_here(c, false, p.len, a);
  if (s.geo.blocks == 0) return cudaErrorInvalidValue;
  const StreamArgs args{p.in + p.lo, p.in_stride, p.out + p.lo, 0, p.len, c.nranks * p.len, s.geo, 0};
  return launch_reduction(a.dtype, a.op, [&](auto t, auto o) {
    stream_reduce_kernel<decltype(t), decltype(o)><<<args.geo.blocks, kHBThreads, 0, stream>>>(c, args);
    return cudaSuccess;
  });
}

// all_gather (the input to every peer: in_stride 0) and all_to_all (block q to peer q).
cudaError_t launch_copy(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const StreamShape s = shape_here(c, false, p.len, a);
  if (s.geo.blocks == 0) return cudaErrorInvalidValue;
  const StreamArgs args{p.in + p.lo, p.in_stride, p.out + p.lo, p.out_stride, p.len, c.nranks * p.len, s.geo, 0};
  stream_copy_kernel<<<args.geo.blocks, kHBThreads, 0, stream>>>(c, args);
  return cudaGetLastError();
}

// all_reduce 2PA-HB: reduce shard r of every rank into my shard, then share it.
cudaError_t launch_two_phase(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const StreamShape s = shape_here(c, true, p.len, a);
  if (s.geo.blocks == 0) return cudaErrorInvalidValue;
  const uint64_t shard = s.seg, bytes = p.len;
  const char* in = p.in + p.lo;
  char* out = p.out + p.lo;
  const StreamArgs reduce{in, shard, out + c.rank * shard, 0, shard, bytes, s.geo, 0};
  const StreamArgs gather{out + c.rank * shard, 0, out, shard, shard, bytes, s.geo, s.phase_bytes};
  return launch_reduction(a.dtype, a.op, [&](auto t, auto o) {
    stream_two_phase_kernel<decltype(t), decltype(o)><<<reduce.geo.blocks, kHBThreads, 0, stream>>>(c, reduce, gather);
    return cudaSuccess;
  });
}

constexpr Launcher kReduce{piece_cap<false>, ready, launch_reduce};
constexpr Launcher kCopy{piece_cap<false>, ready, launch_copy};
constexpr Launcher kTwoPhase{piece_cap<true>, ready, launch_two_phase};

}  // namespace

JAX_MSCCLPP_LAUNCHER(kOnePhaseAllPairsHB) {
  return call.collective == codes::kAllReduce ? &kReduce : nullptr;
}

JAX_MSCCLPP_LAUNCHER(kTwoPhaseAllPairsHB) {
  return call.collective == codes::kAllReduce ? &kTwoPhase : nullptr;
}

JAX_MSCCLPP_LAUNCHER(kAllPairsHB) {
  switch (call.collective) {
    case codes::kReduceScatter: return &kReduce;
    case codes::kAllGather:
    case codes::kAllToAll: return &kCopy;
    default: return nullptr;
  }
}

}  // namespace jax_mscclpp::collectives
