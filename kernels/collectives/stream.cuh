// The streaming HB protocol (internal to this folder): every thread block of every rank pipelines its share of
// a message through a ring of chunk slots in each peer's scratch, one "chunk written" signal per chunk and one
// "slot consumed" credit back, so one launch moves any message size through a bounded scratch.
//
// Geometry (StreamGeometry, computed on the host from the sizes alone, the same on every rank): G blocks; each
// segment (what one rank sends to one peer) is cut into G parts of `part` bytes, part b handled by block b on
// every rank; part b is cut into chunks of `chunk` bytes. Receiver t holds, in the HB half of this launch's epoch
// (collective_common.cuh), S slots of `chunk` bytes per (sender, block):
//
//   slot (sender s, block b, i) of receiver t at  hb(e) + ((j * G + b) * S + i) * chunk,  j = (s - t - 1) mod n
//
// Per block b and peer q, chunk k goes to slot k % S. The sender waits for the credit of chunk k - S before
// writing chunk k (the receiver gives it after reading the slot), puts the chunk, and signals after a block
// barrier (release); the receiver waits for the signal (acquire), reads, and credits after a block barrier. A
// receiver credits only the chunks whose slots the sender fills again in this launch (k + S < chunks), and a sender
// waits for exactly those: every launch consumes every signal it produces, so the semaphore counts carry nothing
// from one launch to the next and a recorded launch replays unchanged, and no launch ends by waiting for credits.
// A part of at most one chunk therefore costs one cross-rank hop: put, signal, wait, read.
//
// Scratch reuse between launches needs no credit: a rank starts launch e + 2, whose slots are those of launch e
// (the HB half of its epoch's parity, collective_common.cuh), only after its launch e + 1 ended, and a launch
// ends only after every peer started it (the call check at its end waits for every peer's call words, posted at
// its start: call_check.cuh), so every peer's launch e, and every read of its slots, had ended. Scratch halves by
// epoch parity keep a launch with another geometry from writing slots a slow peer still reads.
//
// Semaphores: ctx.stream, entry (peer * stream_blocks + b) * 2 + kind (kind 0 data, kind 1 credit), one waiter
// each: thread i of the sender group waits for credits from / signals data to peer (rank + 1 + i) mod n, thread i
// of the receiver group waits for data from / credits peer (rank + 1 + i) mod n.
#pragma once

#include "collectives/collective_common.cuh"

namespace jax_mscclpp::collectives {

constexpr int kStreamData = 0;
constexpr int kStreamCredit = 1;

// Launch geometry of one streaming launch (host and device agree on it).
struct StreamGeometry {
  int32_t blocks;    // G (0: cannot run)
  int32_t slots;     // S
  uint64_t part;     // bytes of every segment per block (16-multiple)
  uint64_t chunk;    // bytes per chunk (16-multiple)
};

// What one rank sends and where what it receives goes. Segment i is `seg` bytes long, clipped to `total`
// (segment i holds bytes [i * seg, (i + 1) * seg) of `total`; with total = n * seg every segment is whole).
//   reduce kernels: peer q gets src + q * src_stride (segment q); the rank folds segment r of every rank into dst.
//   copy kernels:   peer q gets src + q * src_stride (segment r's length); data from q lands at
//                   dst + q * dst_stride (segment q's length); the rank's own segment is copied locally.
struct StreamArgs {
  const char* src;
  uint64_t src_stride;
  char* dst;
  uint64_t dst_stride;
  uint64_t seg;
  uint64_t total;
  StreamGeometry geo;
  uint64_t slot_base;  // offset of this launch's slots within the HB half (a second phase in the same launch)

  JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t seg_len(int i) const {
    const uint64_t lo = min_u64(static_cast<uint64_t>(i) * seg, total);
    return min_u64(seg, total - lo);
  }
};

#if defined(__CUDACC__)

JAX_MSCCLPP_DEVICE_INLINE const D2DSemaphoreDeviceHandle& stream_semaphore(const CollectiveContext& c, int peer,
                                                                          int b, int kind) {
  return c.stream[(static_cast<uint64_t>(peer) * c.stream_blocks + b) * 2 + kind];
}

// dst[i] = src(0)[i] (op) ... (op) src(n-1)[i] over `bytes`, threads [tid, nthreads): the rank-order fold of
// fold_rank_order (same bits), with kUnroll 16-byte loads of each source in flight per thread. Every pointer
// must be 16-byte aligned; the tail shorter than 16 bytes is folded element by element.
template <class T, class Op, int kUnroll = 4, class Src>
__device__ inline void fold_aligned(Src src, int n, char* dst, uint64_t bytes, uint32_t tid, uint32_t nthreads) {
  using Tr = ReduceTraits<T>;
  const uint64_t nvec = bytes / 16;
  for (uint64_t base = tid; base < nvec; base += kUnroll * static_cast<uint64_t>(nthreads)) {
    VecAccumulator<T, Op> acc[kUnroll];
    for (int q = 0; q < n; ++q) {
      const uint4* s = reinterpret_cast<const uint4*>(src(q));
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t i = base + u * static_cast<uint64_t>(nthreads);
        if (i < nvec) v[u] = s[i];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * static_cast<uint64_t>(nthreads) < nvec) {
          if (q == 0) {
            acc[u].init(v[u]);
          } else {
            acc[u].add(v[u]);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t i = base + u * static_cast<uint64_t>(nthreads);
      if (i < nvec) reinterpret_cast<uint4*>(dst)[i] = acc[u].result();
    }
  }
  for (uint64_t i = nvec * (16 / sizeof(T)) + tid; i < bytes / sizeof(T); i += nthreads) {
    typename Tr::Acc a = Tr::widen(reinterpret_cast<const T*>(src(0))[i]);
    for (int q = 1; q < n; ++q) a = combine<Op>(a, Tr::widen(reinterpret_cast<const T*>(src(q))[i]));
    reinterpret_cast<T*>(dst)[i] = Tr::narrow(a);
  }
}

// A thread group of a block: `count` threads from `first`, synchronized by named barrier `id` (1..15). A
// streaming block runs two: senders put chunks, receivers fold or copy what arrived, so the link stays busy while
// the block works on the data.
struct Group {
  uint32_t first, count, id;
  JAX_MSCCLPP_DEVICE_INLINE uint32_t tid() const { return threadIdx.x - first; }
  JAX_MSCCLPP_DEVICE_INLINE void sync() const { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory"); }
};

// One block's view of a streaming launch: its part of every segment, its slots, its semaphores. Held by value
// and used through force-inlined members only, so it lives in registers.
struct StreamBlock {
  CollectiveContext c;
  StreamArgs a;
  int r, n, b;
  uint64_t lo, hi;     // this block's byte range of every segment
  uint64_t half;       // this launch's HB half (scratch offset)
  uint32_t chunks;     // chunks of this block (the same for every segment and on every rank)

  JAX_MSCCLPP_DEVICE_INLINE StreamBlock(const CollectiveContext& ctx, const StreamArgs& args, uint64_t e)
      : c(ctx), a(args), r(ctx.rank), n(ctx.nranks), b(blockIdx.x) {
    const Span s = part_of(args.seg, b, args.geo.part);
    lo = s.lo;
    hi = s.hi;
    half = ScratchLayout::of(ctx.scratch_bytes).hb(e) + args.slot_base;
    chunks = static_cast<uint32_t>(ceil_div(hi - lo, args.geo.chunk));
  }

  // Bytes [first, first + len) of chunk k within a segment of `seg_len` bytes (len may be 0).
  JAX_MSCCLPP_DEVICE_INLINE Span chunk_of(uint32_t k, uint64_t seg_len) const {
    const uint64_t first = min_u64(lo + k * a.geo.chunk, hi);
    const uint64_t last = min_u64(first + a.geo.chunk, hi);
    return {min_u64(first, seg_len), min_u64(last, seg_len)};
  }
  // Slot (sender, this block, k % S) in receiver's scratch, as an offset.
  JAX_MSCCLPP_DEVICE_INLINE uint64_t slot_offset(int sender, int receiver, uint32_t k) const {
    const uint64_t j = static_cast<uint64_t>((sender - receiver - 1 + 2 * n) % n);
    return half + ((j * gridDim.x + b) * a.geo.slots + k % a.geo.slots) * a.geo.chunk;
  }
  JAX_MSCCLPP_DEVICE_INLINE int peer(int i) const { return (r + 1 + i) % n; }

  // Group-wide: wait for `count` signals of `kind` from every peer (one waiter thread per peer), then a barrier.
  JAX_MSCCLPP_DEVICE_INLINE void wait_all(const Group& g, int kind, uint64_t count) const {
    if (count != 0)
      for (int i = g.tid(); i < n - 1; i += g.count) stream_semaphore(c, peer(i), b, kind).wait(count);
    g.sync();
  }
  // Group-wide: a barrier (so the group's accesses are done), then one signal of `kind` to every peer.
  JAX_MSCCLPP_DEVICE_INLINE void signal_all(const Group& g, int kind) const {
    g.sync();
    for (int i = g.tid(); i < n - 1; i += g.count) stream_semaphore(c, peer(i), b, kind).signal();
  }

  // Senders: chunk k of the segment each peer gets (reduce: segment q; copy: segment r), after the credit of
  // chunk k - S; small chunks to every peer at once (copy_jobs).
  template <bool kReduce>
  JAX_MSCCLPP_DEVICE_INLINE void send(const Group& g, uint32_t k) const {
    if (k >= static_cast<uint32_t>(a.geo.slots)) wait_all(g, kStreamCredit, 1);
    copy_jobs(n - 1, a.geo.chunk, [&](int i) {
      const int q = peer(i);
      const Span s = chunk_of(k, a.seg_len(kReduce ? q : r));
      return CopyJob{mem_channel(c, q, 0).remote + slot_offset(r, q, k), a.src + q * a.src_stride + s.lo, s.size()};
    }, g.tid(), g.count);
    signal_all(g, kStreamData);
  }
  // Receivers: wait for chunk k from every peer, read the slots, then release(k): the credit of slot k % S when
  // the senders fill it again in this launch (the one whose credit they wait for), else nothing.
  JAX_MSCCLPP_DEVICE_INLINE void receive(const Group& g, uint32_t k) const { wait_all(g, kStreamData, 1); }
  JAX_MSCCLPP_DEVICE_INLINE void release(const Group& g, uint32_t k) const {
    if (k + static_cast<uint32_t>(a.geo.slots) < chunks) signal_all(g, kStreamCredit);
  }

  JAX_MSCCLPP_DEVICE_INLINE const char* slot(int sender, uint32_t k) const { return c.scratch + slot_offset(sender, r, k); }
};

#endif  // __CUDACC__

// Host: the geometry of a streaming launch over segments of `seg` bytes on `nranks` ranks, with `hb_half` bytes
// of slots and at most `max_blocks` blocks (the context's stream_blocks, or a launch's cap below it); blocks 0 when
// the scratch cannot hold one 16-byte slot per (peer, block). The knobs are the context's (collective.h,
// StreamTuning): a block per t.block_bytes of the segment, and chunks as large as the block's part, the largest
// chunk (t.max_chunk) and the slots allow. A part that fits one chunk moves in one hop; a larger part pipelines
// its puts and reads through the slots. docs/architecture.md, "Streaming HB", gives the model behind the sizes.
inline StreamGeometry stream_geometry(uint64_t seg, int nranks, uint64_t hb_half, int max_blocks,
                                      const StreamTuning& t) {
  StreamGeometry g{0, t.slots < 1 ? 1 : t.slots, 0, 0};
  if (nranks < 2 || max_blocks < 1) return g;
  int blocks = static_cast<int>(ceil_div(seg == 0 ? 1 : seg, t.block_bytes < 1 ? 1 : t.block_bytes));
  if (blocks > max_blocks) blocks = max_blocks;
  if (blocks < 1) blocks = 1;
  for (; blocks >= 1; blocks /= 2) {
    const uint64_t cap = round_down(hb_half / (static_cast<uint64_t>(nranks - 1) * blocks * g.slots), 16);
    if (cap < 16) continue;
    g.blocks = blocks;
    g.part = round_up(ceil_div(seg, blocks), 16);
    uint64_t chunk = g.part;
    if (chunk > round_up(t.max_chunk, 16)) chunk = round_up(t.max_chunk, 16);
    if (chunk > cap) chunk = cap;
    g.chunk = chunk < 16 ? 16 : chunk;
    return g;
  }
  return g;
}

}  // namespace jax_mscclpp::collectives
