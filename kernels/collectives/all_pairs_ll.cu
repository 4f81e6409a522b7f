// All-pairs collectives on the LL protocol (LL16 packets: 8 bytes of data + two copies of the flag in one 16-byte
// store): for small messages, where one flag trip between ranks is the whole cost.
//
// all_reduce 2PA-LL and reduce_scatter (one kernel, typed):
//   1. rank r writes chunk q of its data as packets into rank q's RS area, slot r (every q != r);
//   2. rank r reads, packet by packet, slot q of its RS area for every q and folds them with its own chunk r in
//      rank order 0..n-1 (one reducer per chunk: every rank gets the same bits);
//   3. all_reduce only: rank r writes its reduced chunk as packets into every peer's AG area, slot r, and reads
//      slots q of its own AG area into output chunk q.
// all_gather and all_to_all (one kernel, untyped): rank r writes its block for q (all_gather: its input;
//   all_to_all: input block q) as packets into rank q's slot r, copies its own block, reads slot q into output
//   block q.
//
// Flags: every packet carries this launch's epoch e and lands in LL half (e & 1). A reader spins until both
// flags of a packet equal e, so it never takes a packet of an earlier launch (flags e - 2, e - 4, ... or 0) for
// this one. A writer of launch e + 2 cannot overwrite a packet a slow reader still waits for in launch e: it has
// completed launch e + 1, which needed packets every peer wrote in launch e + 1 (phase 1 reads every peer's
// contribution, phase 3 every peer's reduced chunk), so every peer had finished launch e (stream order).
// No semaphore is used, so the kernels need one memory channel per peer (index 0, for the peer's scratch).
#include "collectives/algorithms.h"
#include "collectives/protocol.h"

namespace jax_mscclpp::collectives {
namespace {

__device__ inline LL16Packet* packets_at(char* base, uint64_t off) { return reinterpret_cast<LL16Packet*>(base + off); }

template <class T, class Op>
__global__ void __launch_bounds__(kLLThreads)
    all_pairs_reduce_ll_kernel(CollectiveContext c, Piece p, int32_t collective) {
  const int r = c.rank, n = c.nranks, b = blockIdx.x;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uint64_t e = begin_launch(c);
  const uint32_t flag = static_cast<uint32_t>(e);
  const bool ar = collective == codes::kAllReduce;
  const Chunks ch{p, ar, ar ? round_up(ceil_div(p.len, n), 16) : round_up(p.len, 16)};
  const uint64_t slot = 2 * ch.chunk;  // packet bytes of one chunk (16 per 8 of data)
  const uint64_t rs = ScratchLayout::of(c.scratch_bytes).ll(e), ag = rs + n * slot;
  const uint64_t part = round_up(ceil_div(ch.chunk, gridDim.x), 16);  // block b: [b * part, +part) of each chunk

  // 1. My contribution to chunk q, part b, into peer q's RS slot r.
  for (int k = 1; k < n; ++k) {
    const int q = (r + k) % n;
    const Span s = part_of(ch.len(q), b, part);
    if (s.size() != 0)
      mem_channel(c, q, 0).put_packets<LL16Packet>(rs + r * slot + 2 * s.lo, ch.in(q) + s.lo, s.size(), flag, tid, nt);
  }

  // 2. Fold chunk r, part b, packet by packet in rank order, my own input in place of slot r.
  {
    const Span s = part_of(ch.len(r), b, part);
    const char* mine = ch.in(r) + s.lo;
    char* dst = ch.out(r) + s.lo;
    const uint64_t npk = ceil_div(s.size(), 8);
    for (uint64_t i = tid; i < npk; i += nt) {
      const uint32_t valid = static_cast<uint32_t>(min_u64(8, s.size() - i * 8));
      VecAccumulator<T, Op> acc;
      for (int q = 0; q < n; ++q) {
        uint2 v;
        if (q == r) {
          v = load8(mine + i * 8, valid);
        } else {
          v = packets_at(c.scratch, rs + q * slot + 2 * s.lo)[i].read(flag, mem_channel(c, q, 0).semaphore.site);
        }
        const uint4 wide = make_uint4(v.x, v.y, 0, 0);  // lanes past the 8 bytes ride along unused
        if (q == 0) {
          acc.init(wide);
        } else {
          acc.add(wide);
        }
      }
      const uint4 res = acc.result();
      const uint2 val = make_uint2(res.x, res.y);
      store8(dst + i * 8, val, valid);
      if (ar) {
        for (int k = 1; k < n; ++k) {
          const int q = (r + k) % n;
          packets_at(mem_channel(c, q, 0).remote, ag + r * slot + 2 * s.lo)[i].write(val, flag);
        }
      }
    }
  }

  // 3. all_reduce: every peer's reduced chunk, part b, into the output. The barrier orders phase 1's reads of
  // the input before these writes (in == out is allowed).
  if (ar) {
    __syncthreads();
    for (int k = 1; k < n; ++k) {
      const int q = (r + k) % n;
      const Span s = part_of(ch.len(q), b, part);
      if (s.size() != 0)
        read_packets(ch.out(q) + s.lo, packets_at(c.scratch, ag + q * slot + 2 * s.lo), s.size(), flag, tid, nt,
                     mem_channel(c, q, 0).semaphore.site);
    }
  }
  finish_launch(c, e);
}

__global__ void __launch_bounds__(kLLThreads) all_pairs_copy_ll_kernel(CollectiveContext c, Piece p, int32_t collective) {
  const int r = c.rank, n = c.nranks;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uint64_t e = begin_launch(c);
  const uint32_t flag = static_cast<uint32_t>(e);
  const bool a2a = collective == codes::kAllToAll;
  const uint64_t slot = 2 * round_up(p.len, 16);
  const uint64_t base = ScratchLayout::of(c.scratch_bytes).ll(e);
  const Span s = split(p.len, blockIdx.x, gridDim.x, 16);
  auto src = [&](int q) { return (a2a ? p.in + q * p.in_stride : p.in) + p.lo + s.lo; };
  auto dst = [&](int q) { return p.out + q * p.out_stride + p.lo + s.lo; };

  if (s.size() != 0) {
    for (int k = 1; k < n; ++k) {
      const int q = (r + k) % n;
      mem_channel(c, q, 0).put_packets<LL16Packet>(base + r * slot + 2 * s.lo, src(q), s.size(), flag, tid, nt);
    }
    if (src(r) != dst(r)) copy_bytes(dst(r), src(r), s.size(), tid, nt);
    __syncthreads();  // all_to_all in place: the input blocks are read before output blocks are written
    for (int k = 1; k < n; ++k) {
      const int q = (r + k) % n;
      read_packets(dst(q), packets_at(c.scratch, base + q * slot + 2 * s.lo), s.size(), flag, tid, nt,
                   mem_channel(c, q, 0).semaphore.site);
    }
  }
  finish_launch(c, e);
}

// all_reduce: RS + AG areas of n slots of 2 * chunk each, chunk = piece / n; reduce_scatter: RS area only,
// chunk = piece.
uint64_t piece_cap_reduce(int32_t collective, int nranks, uint64_t, uint64_t scratch_bytes, const StreamTuning&) {
  const ScratchLayout s = ScratchLayout::of(scratch_bytes);
  if (collective == codes::kAllReduce) return nranks * round_down(s.ll_half / (4 * static_cast<uint64_t>(nranks)), 16);
  return round_down(s.ll_half / (2 * static_cast<uint64_t>(nranks)), 16);
}

uint64_t piece_cap_copy(int32_t, int nranks, uint64_t, uint64_t scratch_bytes, const StreamTuning&) {
  return round_down(ScratchLayout::of(scratch_bytes).ll_half / (2 * static_cast<uint64_t>(nranks)), 16);
}

cudaError_t launch_reduce(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const uint64_t chunk = a.collective == codes::kAllReduce ? ceil_div(p.len, c.nranks) : p.len;
  const int blocks = blocks_for(chunk, 2048, kLLMaxBlocks);
  return launch_reduction(a.dtype, a.op, [&](auto t, auto o) {
    all_pairs_reduce_ll_kernel<decltype(t), decltype(o)><<<blocks, kLLThreads, 0, stream>>>(c, p, a.collective);
    return cudaSuccess;
  });
}

// A block of the copy kernel puts its span to every peer one after another, then reads every peer's packets one
// after another: its time grows with its span times the peers, so the grid gives each block about kLLCopyBlockBytes
// summed over its peers. On 8 ranks sharing one H100, an all_gather of 8 KiB blocks took 11.1 us on 2 blocks of 4
// KiB spans and 8.3 on 14 (bench/results/kernel-record-nvidia-h100-2026-12-07-{c1c84b4,504554e}-float32.json).
constexpr uint64_t kLLCopyBlockBytes = 4096;

cudaError_t launch_copy(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const int blocks = blocks_for(p.len * (c.nranks - 1), kLLCopyBlockBytes, kLLMaxBlocks);
  all_pairs_copy_ll_kernel<<<blocks, kLLThreads, 0, stream>>>(c, p, a.collective);
  return cudaGetLastError();
}

constexpr Launcher kReduce{piece_cap_reduce, nullptr, launch_reduce};
constexpr Launcher kCopy{piece_cap_copy, nullptr, launch_copy};

}  // namespace

JAX_MSCCLPP_LAUNCHER(kTwoPhaseAllPairsLL) {
  return call.collective == codes::kAllReduce ? &kReduce : nullptr;
}

JAX_MSCCLPP_LAUNCHER(kAllPairsLL) {
  switch (call.collective) {
    case codes::kReduceScatter: return &kReduce;
    case codes::kAllGather:
    case codes::kAllToAll: return &kCopy;
    default: return nullptr;
  }
}

JAX_MSCCLPP_LAUNCHER(kAllPairs) {
  // The protocol by the call's block size, world and placement (selection.def, JAX_MSCCLPP_PROTOCOL_RULE).
  return protocol_algorithm(codes::kAllPairs, call) == codes::kAllPairsLL ? launcher_kAllPairsLL(call)
                                                                           : launcher_kAllPairsHB(call);
}

}  // namespace jax_mscclpp::collectives
