// all_reduce 2PA-NVLS: two-phase all-pairs on the SwitchChannel (reduce / broadcast over every rank's scratch).
//
//   1. rank r copies its input into its OWN scratch (HB half e & 1), chunk q at the same offset on every rank;
//      barrier (every rank's copy is visible to every rank);
//   2. rank r reduces chunk r over the group (SwitchChannel reduce: the switch with multicast hardware, the
//      members' peer pointers in the emulation) and stores the result into every member's scratch at the same
//      place (SwitchChannel broadcast); barrier (every chunk's result is in every scratch);
//   3. rank r copies all chunks from its own scratch to its output.
// Block b handles part b of every chunk and synchronizes over memory channel b, so only the block b's of all
// ranks meet in a barrier. Chunk r is read and written only by rank r, so phase 2 needs no barrier inside.
//
// Backends: the emulation (the only one run in this project's tests and benchmarks; NVLink multicast is opt-in
// and refused on machines with NCCL_NVLS_ENABLE=0) reduces the members in rank order 0..n-1, widened, with one
// rounding: the same bits as the other all-pairs algorithms. The hardware path reduces in the switch (its own
// order and precision) and needs 16-byte multiples and a (dtype, op) multimem has; launch_collective refuses
// other calls with cudaErrorNotReady.
//
// Scratch reuse: the second barrier of launch e follows every access any rank makes to another rank's scratch
// in launch e, and after it each rank touches only its own scratch. So no access of launch e can overlap a
// later launch's writes, whichever half; the halves are kept for uniformity with the other HB algorithms.
#include "collectives/algorithms.h"

namespace jax_mscclpp::collectives {
namespace {

template <class T, class Op>
__global__ void __launch_bounds__(kHBThreads) all_reduce_switch_kernel(CollectiveContext c, Piece p) {
  const int r = c.rank, n = c.nranks, b = blockIdx.x;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uint64_t e = begin_launch(c);
  const Chunks ch{p, true, round_up(ceil_div(p.len, n), 16)};
  const uint64_t base = ScratchLayout::of(c.scratch_bytes).hb(e);
  const uint64_t part = round_up(ceil_div(ch.chunk, gridDim.x), 16);

  // 1. Part b of every chunk into my scratch.
  for (int q = 0; q < n; ++q) {
    const Span s = part_of(ch.len(q), b, part);
    copy_bytes(c.scratch + base + q * ch.chunk + s.lo, ch.in(q) + s.lo, s.size(), tid, nt);
  }
  barrier_peers(c, b);

  // 2. Chunk r, part b: reduce over the group, store to every member. 16-byte vectors; a tail of whole elements
  // (< 16 bytes, only at the end of the message) through the emulation's member pointers, folded like reduce16.
  {
    const Span s = part_of(ch.len(r), b, part);
    const uint64_t off = base + r * ch.chunk + s.lo;
    const uint64_t nvec = s.size() / 16;
    for (uint64_t i = tid; i < nvec; i += nt) c.sw.broadcast16(off + 16 * i, c.sw.reduce16<T, Op>(off + 16 * i));
    using Tr = ReduceTraits<T>;
    const uint64_t first = nvec * 16 / sizeof(T), count = s.size() / sizeof(T);
    if (c.sw.multicast == nullptr) {
      for (uint64_t i = first + tid; i < count; i += nt) {
        const uint64_t o = off + i * sizeof(T);
        typename Tr::Acc a = Tr::widen(*reinterpret_cast<const T*>(c.sw.members[0] + o));
        for (int m = 1; m < n; ++m) a = combine<Op>(a, Tr::widen(*reinterpret_cast<const T*>(c.sw.members[m] + o)));
        const T v = Tr::narrow(a);
        for (int m = 0; m < n; ++m) *reinterpret_cast<T*>(c.sw.members[m] + o) = v;
      }
    }
  }
  barrier_peers(c, b);

  // 3. Every chunk, part b, from my scratch to my output.
  for (int q = 0; q < n; ++q) {
    const Span s = part_of(ch.len(q), b, part);
    copy_bytes(ch.out(q) + s.lo, c.scratch + base + q * ch.chunk + s.lo, s.size(), tid, nt);
  }
  finish_launch(c, e);
}

// Emulated, the members are an array of at most kMaxSwitchMembers scratches.
uint64_t piece_cap(int32_t, int nranks, uint64_t, uint64_t scratch_bytes, const StreamTuning&) {
  if (nranks > kMaxSwitchMembers) return 0;
  return nranks * round_down(ScratchLayout::of(scratch_bytes).hb_half / static_cast<uint64_t>(nranks), 16);
}

// Emulated: the members' scratches; hardware multicast: 16-byte multiples.
cudaError_t ready(const CollectiveContext& c, uint64_t block_bytes) {
  if (c.sw.multicast == nullptr && (c.sw.members == nullptr || c.nranks > kMaxSwitchMembers)) return cudaErrorNotReady;
  if (c.sw.multicast != nullptr && block_bytes % 16 != 0) return cudaErrorNotReady;
  return cudaSuccess;
}

cudaError_t launch(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const int cap = c.channels_per_peer < kHBMaxBlocks ? c.channels_per_peer : kHBMaxBlocks;
  const int blocks = blocks_for(ceil_div(p.len, c.nranks), 64 << 10, cap);
  return launch_reduction(a.dtype, a.op, [&](auto t, auto o) {
    using T = decltype(t);
    using Op = decltype(o);
    if (c.sw.multicast != nullptr) {
      if constexpr (!multimem_supported<T, Op>()) return cudaErrorNotReady;
    }
    all_reduce_switch_kernel<T, Op><<<blocks, kHBThreads, 0, stream>>>(c, p);
    return cudaSuccess;
  });
}

}  // namespace

JAX_MSCCLPP_LAUNCHER(kTwoPhaseNvls) {
  static constexpr Launcher kLauncher{piece_cap, ready, launch};
  return call.collective == codes::kAllReduce ? &kLauncher : nullptr;
}

}  // namespace jax_mscclpp::collectives
