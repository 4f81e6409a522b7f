// Collectives over buffers every rank can reach (kInPlace, codes.def; launch_in_place, collective.h): no scratch.
// Each rank's kernel reads its peers' inputs and writes their outputs where they are:
//   all_reduce      rank r folds slice r of every rank's input, in rank order, and stores the result into slice r
//                   of every rank's output (the slices: the buffer cut into n parts at 16-byte boundaries);
//   reduce_scatter  rank r folds block r of every rank's input, in rank order, into its own output;
//   all_gather      rank r stores its input into block r of every rank's output;
//   all_to_all      rank r stores block q of its input into block r of rank q's output, for every q.
// So every input byte is read once and every output byte written once: the least memory traffic the collective
// has. Each element is folded by one rank, so every rank gets the same bits.
//
// Ordering (block b of every rank works on the same part of every slice or block, on every rank alike):
//   - before its first access, block b meets block b of every peer (meet_peers, on the stream semaphores of block
//     b, "chunk written" kind: every launch consumes the signals it causes there, collectives/stream.cuh): a
//     peer's launch has started, so its stream's earlier work is done (its input written, its output's old
//     contents read);
//   - after its last access, it meets them again: so no rank's launch ends, and its stream goes on to reuse its
//     buffers, while a block of a peer still reads or writes them; the signal after the stores releases them to
//     the rank whose output they are.
// Every block of every rank's launch must be resident at once: the grid is a function of the sizes and the
// caller's cap alone (the same on every rank), and the caller caps it so that the ranks sharing a GPU fit on it.
//
// Where the buffers come from:
//   - given (launch_in_place): every rank's, as mapped in this process (the NCCL library's windows);
//   - posted: each rank knows only its own, as each peer's process addresses them (launch_in_place_posted: ranks
//     of one process, CollectiveContext::direct, where the addresses are the same for every peer;
//     launch_in_place_views: ranks of several processes, each buffer's allocation mapped by every peer,
//     runtime/gpu/allocation_exchange.h). Thread q of block b stores {input, output} as rank q addresses them into
//     its own scratch, slot (b, q) of the HB half of this launch's epoch (the kernel uses no scratch otherwise),
//     before the first meet, whose signal releases them; after the meet, block b reads slot (b, rank) of every
//     peer's scratch. A fast rank cannot overwrite a slot a slow peer has not read: its next launch to use that
//     half is two epochs on (collective_common.cuh's argument), and this launch already ends only after every
//     peer's block b has passed its reads (the second meet).
#include "collectives/algorithms.h"

namespace jax_mscclpp::collectives {
namespace {

constexpr int kInPlaceThreads = 512;
constexpr uint64_t kPostBytes = 16;                        // one reader's {input, output}
constexpr uint64_t kBlockPostBytes = kPostBytes * kDirectPeers;  // a block's posts, one per reader

// Block b's post for rank `reader` of launch e in scratch `scratch` (this rank's, or a peer's as mapped here).
__device__ inline uint64_t* post_slot(const CollectiveContext& c, char* scratch, uint64_t e, int b, int reader) {
  return reinterpret_cast<uint64_t*>(scratch + ScratchLayout::of(c.scratch_bytes).hb(e) + b * kBlockPostBytes +
                                     reader * kPostBytes);
}

// Block-wide: every rank's block b meets block b of every peer; what each wrote before is visible to the others
// after (a block barrier, one signal per peer from thread k - 1, one waiter per peer, a block barrier).
__device__ inline void meet_peers(const CollectiveContext& c, int b) {
  __syncthreads();
  for (int k = threadIdx.x + 1; k < c.nranks; k += blockDim.x)
    stream_semaphore(c, (c.rank + k) % c.nranks, b, kStreamData).signal();
  for (int k = threadIdx.x + 1; k < c.nranks; k += blockDim.x)
    stream_semaphore(c, (c.rank + k) % c.nranks, b, kStreamData).wait();
  __syncthreads();
}

// Bytes rank r handles per source: its slice of an all_reduce, a block of the others.
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t slice_bytes(int32_t collective, uint64_t block_bytes, int nranks) {
  return collective == codes::kAllReduce ? round_up(ceil_div(block_bytes, nranks), 16) : block_bytes;
}

// `given`: every rank's buffers; posted: this rank's as each rank addresses them, and the peers' are posted
// (above).
template <class T, class Op>
__global__ void __launch_bounds__(kInPlaceThreads) in_place_kernel(CollectiveContext c, InPlaceBuffers given,
                                                                   bool posted, int32_t collective,
                                                                   uint64_t block_bytes) {
  const int r = c.rank, n = c.nranks;
  const uint64_t e = begin_launch(c);
  if (posted)
    for (int q = threadIdx.x; q < n; q += blockDim.x) {
      uint64_t* mine = post_slot(c, c.scratch, e, blockIdx.x, q);
      mine[0] = reinterpret_cast<uint64_t>(given.in[q]);
      mine[1] = reinterpret_cast<uint64_t>(given.out[q]);
    }
  meet_peers(c, blockIdx.x);
  __shared__ InPlaceBuffers b;
  for (int q = threadIdx.x; q < n; q += blockDim.x) {
    if (posted && q != r) {
      const uint64_t* theirs = post_slot(c, remote_scratch(c, q), e, blockIdx.x, r);
      b.in[q] = reinterpret_cast<const char*>(load_relaxed_sys(theirs));
      b.out[q] = reinterpret_cast<char*>(load_relaxed_sys(theirs + 1));
    } else {
      b.in[q] = given.in[q];
      b.out[q] = given.out[q];
    }
  }
  __syncthreads();

  const uint64_t slice = slice_bytes(collective, block_bytes, n);
  if (collective == codes::kAllReduce) {
    const Span mine = part_of(block_bytes, r, slice);
    const Span part = split(mine.size(), blockIdx.x, gridDim.x, 16);
    const uint64_t at = mine.lo + part.lo;
    fold_rank_order<T, Op>([&](int q) { return b.in[q] + at; }, n, [&](int q) { return b.out[q] + at; }, n,
                           part.size(), threadIdx.x, blockDim.x);
  } else {
    const Span part = split(block_bytes, blockIdx.x, gridDim.x, 16);
    if (collective == codes::kReduceScatter) {
      const uint64_t at = r * block_bytes + part.lo;
      fold_rank_order<T, Op>([&](int q) { return b.in[q] + at; }, n, [&](int) { return b.out[r] + part.lo; }, 1,
                             part.size(), threadIdx.x, blockDim.x);
    } else if (collective == codes::kAllGather) {
      fold_rank_order<T, Op>([&](int) { return b.in[r] + part.lo; }, 1,
                             [&](int q) { return b.out[q] + r * block_bytes + part.lo; }, n, part.size(), threadIdx.x,
                             blockDim.x);
    } else {  // all_to_all
      for (int k = 0; k < n; ++k) {
        const int q = (r + k) % n;
        fold_rank_order<T, Op>([&](int) { return b.in[r] + q * block_bytes + part.lo; }, 1,
                               [&](int) { return b.out[q] + r * block_bytes + part.lo; }, 1, part.size(),
                               threadIdx.x, blockDim.x);
      }
    }
  }

  meet_peers(c, blockIdx.x);
  finish_launch(c, e);
}

}  // namespace

// Not a launcher of the scratch pieces: launch_collective runs kInPlace through launch_in_place_posted.
JAX_MSCCLPP_LAUNCHER(kInPlace) { return nullptr; }

}  // namespace jax_mscclpp::collectives

namespace jax_mscclpp {

bool in_place_supported(int32_t collective, int32_t dtype, int32_t op) {
  if (dtype_bytes(dtype) == 0) return false;
  if (collective == codes::kAllGather || collective == codes::kAllToAll) return true;
  if (collective != codes::kAllReduce && collective != codes::kReduceScatter) return false;
  return op == codes::kSum || op == codes::kMax || op == codes::kMin;
}

namespace {

cudaError_t launch_in_place_kernel(const CollectiveContext& ctx, int32_t collective, const InPlaceBuffers& buffers,
                                   bool posted, uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                                   int32_t max_blocks) {
  using namespace collectives;
  if (!in_place_supported(collective, dtype, op)) return cudaErrorInvalidValue;
  if (ctx.nranks < 2 || ctx.nranks > kDirectPeers || ctx.rank < 0 || ctx.rank >= ctx.nranks)
    return cudaErrorInvalidValue;
  for (int q = 0; q < ctx.nranks; ++q)
    if (buffers.in[q] == nullptr || buffers.out[q] == nullptr) return cudaErrorInvalidValue;
  const uint64_t block_bytes = block_count * dtype_bytes(dtype);
  if (block_bytes == 0) return cudaSuccess;
  if (ctx.mem == nullptr || ctx.epoch == nullptr || ctx.stream == nullptr || ctx.stream_blocks < 1)
    return cudaErrorNotReady;
  if (posted && ScratchLayout::of(ctx.scratch_bytes).hb_half < ctx.stream_blocks * kBlockPostBytes)
    return cudaErrorNotReady;
  const bool reduces = collective_reduces(collective);
  const int cap = max_blocks > 0 && max_blocks < ctx.stream_blocks ? max_blocks : ctx.stream_blocks;
  // A block per the streaming kernels' block bytes of a slice (StreamTuning::block_bytes), as they split a segment.
  const uint64_t per_block = ctx.stream_tuning.block_bytes > 0 ? ctx.stream_tuning.block_bytes : 1;
  const int blocks = blocks_for(slice_bytes(collective, block_bytes, ctx.nranks), per_block, cap);
  CollectiveContext c = ctx;
  c.call = call_words(collective, op, codes::kInPlace, dtype, block_count);
  // The moves go as bytes; the reductions in their type (signed sums as unsigned: the same bits).
  return launch_reduction(reduces ? dtype : codes::kU8, reduces ? op : codes::kSum, [&](auto t, auto o) {
    in_place_kernel<decltype(t), decltype(o)><<<blocks, kInPlaceThreads, 0, stream>>>(c, buffers, posted, collective,
                                                                                       block_bytes);
    return cudaSuccess;
  });
}

// Whether `algorithm` runs a call's blocks as streaming HB (itself, or by its protocol rows).
bool runs_streaming_hb(int32_t algorithm, const collectives::ProtocolCall& call) {
  const int32_t runs = collectives::protocol_algorithm(algorithm, call);
  return runs == codes::kOnePhaseAllPairsHB || runs == codes::kTwoPhaseAllPairsHB || runs == codes::kAllPairsHB;
}

}  // namespace

cudaError_t launch_in_place(const CollectiveContext& ctx, int32_t collective, const InPlaceBuffers& buffers,
                            uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream, int32_t max_blocks) {
  return launch_in_place_kernel(ctx, collective, buffers, false, block_count, dtype, op, stream, max_blocks);
}

cudaError_t launch_in_place_posted(const CollectiveContext& ctx, int32_t collective, const void* in, void* out,
                                   uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                                   int32_t max_blocks) {
  if (ctx.direct == 0) return cudaErrorNotReady;
  InPlaceBuffers own{};
  for (int q = 0; q < ctx.nranks && q < kDirectPeers; ++q) {
    own.in[q] = static_cast<const char*>(in);
    own.out[q] = static_cast<char*>(out);
  }
  return launch_in_place_kernel(ctx, collective, own, true, block_count, dtype, op, stream, max_blocks);
}

cudaError_t launch_in_place_views(const CollectiveContext& ctx, int32_t collective, const InPlaceBuffers& views,
                                  uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                                  int32_t max_blocks) {
  return launch_in_place_kernel(ctx, collective, views, true, block_count, dtype, op, stream, max_blocks);
}

int32_t direct_algorithm(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                         const void* out, uint64_t block_count, int32_t dtype, int32_t op) {
  return ctx.direct != 0 ? in_place_algorithm(ctx, collective, algorithm, in, out, block_count, dtype, op) : algorithm;
}

int32_t in_place_algorithm(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                           const void* out, uint64_t block_count, int32_t dtype, int32_t op) {
  if (ctx.nranks < 2 || ctx.nranks > kDirectPeers || !in_place_supported(collective, dtype, op)) return algorithm;
  const uint64_t block_bytes = block_count * dtype_bytes(dtype);
  if (!runs_streaming_hb(algorithm, {collective, block_bytes, ctx.nranks, ctx.placement})) return algorithm;
  const uint64_t rank_bytes = collective == codes::kAllReduce ? block_bytes : block_bytes * uint64_t(ctx.nranks);
  if (rank_bytes < collectives::in_place_min_rank_bytes(ctx.nranks)) return algorithm;  // selection.def
  if (collective == codes::kAllToAll) {  // a peer would read blocks this rank overwrites
    const uint64_t bytes = block_bytes * uint64_t(ctx.nranks);
    const char* i = static_cast<const char*>(in);
    const char* o = static_cast<const char*>(out);
    if (i < o + bytes && o < i + bytes) return algorithm;
  }
  return codes::kInPlace;
}

}  // namespace jax_mscclpp
