// All-pairs collectives on the streaming HB protocol (stream.cuh): for large messages. One launch moves the
// whole message through a bounded scratch; every block pipelines its chunks (chunk k + 1 is sent before chunk k
// is folded or copied out), so the link stays busy while the block works on what arrived.
//
//   reduce kernel (typed):  rank r sends segment q of its input to peer q and folds segment r of every rank in
//                           rank order 0..n-1 (its own input in place of its slot) into its output. all_reduce
//                           1PA-HB: every segment is the whole input (one-shot push, best for 2 ranks);
//                           reduce_scatter: segment q is input block q; all_reduce 2PA-HB, first launch:
//                           segment q is shard q of the input, folded into shard r of the output.
//   copy kernel (untyped):  rank r sends segment q of its input (all_gather: its input; all_to_all: block q) to
//                           peer q and copies what peer q sent into output block q; its own block is copied
//                           locally. all_reduce 2PA-HB, second launch: shard r of the output to every peer.
//
// in == out (all_reduce, all_to_all): chunk k of every segment is sent (and the block barrier of its signal
// passed) before chunk k of the output is written, and chunk k of the output depends on nothing later.
#include "collectives/algorithms.h"
#include "collectives/stream.cuh"

namespace jax_mscclpp::collectives {
namespace {

template <class T, class Op>
__global__ void __launch_bounds__(kHBThreads) stream_reduce_kernel(CollectiveContext c, StreamArgs a) {
  const uint64_t e = launch_epoch(c);
  const StreamBlock sb(c, a, e);
  const int r = sb.r;
  const uint64_t len = a.seg_len(r);
  const char* mine = a.src + r * a.src_stride;
  const bool aligned = ((reinterpret_cast<uintptr_t>(mine) | reinterpret_cast<uintptr_t>(a.dst)) & 15) == 0;
  if (sb.chunks != 0) sb.send<true>(0);
  for (uint32_t k = 0; k < sb.chunks; ++k) {
    if (k + 1 < sb.chunks) sb.send<true>(k + 1);
    sb.receive(k);
    const Span s = sb.chunk_of(k, len);
    auto src = [&](int q) -> const char* { return q == r ? mine + s.lo : sb.slot(q, k); };
    if (aligned) {
      fold_aligned<T, Op>(src, sb.n, a.dst + s.lo, s.size(), threadIdx.x, blockDim.x);
    } else {
      auto dst = [&](int) -> char* { return a.dst + s.lo; };
      fold_rank_order<T, Op>(src, sb.n, dst, 1, s.size(), threadIdx.x, blockDim.x);
    }
    sb.release(k);
  }
  sb.finish();
  finish_launch(c, e);
}

__global__ void __launch_bounds__(kHBThreads) stream_copy_kernel(CollectiveContext c, StreamArgs a) {
  const uint64_t e = launch_epoch(c);
  const StreamBlock sb(c, a, e);
  const int r = sb.r, n = sb.n;
  const char* mine = a.src + r * a.src_stride;
  char* own = a.dst + r * a.dst_stride;
  if (sb.chunks != 0) sb.send<false>(0);
  for (uint32_t k = 0; k < sb.chunks; ++k) {
    if (k + 1 < sb.chunks) sb.send<false>(k + 1);
    if (mine != own) {
      const Span s = sb.chunk_of(k, a.seg_len(r));
      copy_bytes(own + s.lo, mine + s.lo, s.size(), threadIdx.x, blockDim.x);
    }
    sb.receive(k);
    for (int i = 0; i < n - 1; ++i) {
      const int q = sb.peer(i);
      const Span s = sb.chunk_of(k, a.seg_len(q));
      copy_bytes(a.dst + q * a.dst_stride + s.lo, sb.slot(q, k), s.size(), threadIdx.x, blockDim.x);
    }
    sb.release(k);
  }
  sb.finish();
  finish_launch(c, e);
}

}  // namespace

cudaError_t launch_stream_reduce(const CollectiveContext& c, const StreamArgs& a, int32_t dtype, int32_t op,
                                 cudaStream_t stream) {
  cudaError_t result = cudaErrorInvalidValue;
  dispatch_reduction(dtype, op, [&](auto t, auto o) {
    stream_reduce_kernel<decltype(t), decltype(o)><<<a.geo.blocks, kHBThreads, 0, stream>>>(c, a);
    result = cudaGetLastError();
  });
  return result;
}

cudaError_t launch_stream_copy(const CollectiveContext& c, const StreamArgs& a, cudaStream_t stream) {
  stream_copy_kernel<<<a.geo.blocks, kHBThreads, 0, stream>>>(c, a);
  return cudaGetLastError();
}

}  // namespace jax_mscclpp::collectives
