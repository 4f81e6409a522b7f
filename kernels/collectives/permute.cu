// The permutation (codes.def, kPermute): every rank sends its block to at most one rank (LaunchArgs::send_to) and
// receives at most one block (LaunchArgs::recv_from), over MemoryChannel one-sided puts into the receiver's
// registered scratch. A rank that receives nothing writes zeros; a rank that names itself copies locally. Every
// rank of the communicator launches, whatever its role, so that launches keep their epochs in step.
//
//   LL (small blocks): the sender writes its part of the block as LL16 packets flagged with the launch's epoch e
//       into the receiver's LL half (e & 1) from offset 0 (a receiver has one sender); the receiver reads the
//       packets into its output as they arrive. No semaphore.
//   HB (large blocks, streaming, one launch for any size): the block is cut into G parts (one per thread block),
//       each into chunks; per thread block the receiver holds S chunk slots in its HB half. The block's sender
//       threads put chunk k into slot k % S after the credit of chunk k - S and signal; its receiver threads wait
//       for the signal, copy the slot to the output and credit it back when the senders fill that slot again in
//       this launch, so the launch consumes every signal it produced (stream.cuh's protocol, one peer each way).
//
// Reuse of a scratch half: launch e + 2 writes the half launch e read. Unlike the all-pairs collectives, a rank's
// data here does not depend on every peer's; the ordering comes from the call check instead: at the end of launch
// e every rank waits for every peer's call words of launch e (finish_launch, call_check.cuh), which each peer
// posts when it starts launch e, after it finished launch e - 1. So a rank starting launch e + 2 (having ended
// e + 1) knows every peer started e + 1, hence finished e: no one still reads half e & 1. An LL reader of launch
// e waits for flag e and never takes a packet of an earlier launch (flags e - 2, e - 4, ..., or 0).
//
// The launchers take raw pointers and peer ranks only (no XLA types): launch_permute (collective.h) is the entry
// point a point-to-point send/receive can share.
#include "collectives/algorithms.h"
#include "collectives/protocol.h"
#include "collectives/stream.cuh"

namespace jax_mscclpp::collectives {
namespace {

__device__ inline LL16Packet* packets_at(char* base, uint64_t off) { return reinterpret_cast<LL16Packet*>(base + off); }

// dst[0, bytes) <- 0, threads [tid, nthreads).
__device__ inline void zero_bytes(char* dst, uint64_t bytes, uint32_t tid, uint32_t nthreads) {
  const uint64_t head = min_u64((16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15, bytes);
  for (uint64_t i = tid; i < head; i += nthreads) dst[i] = 0;
  uint4* body = reinterpret_cast<uint4*>(dst + head);
  const uint64_t nvec = (bytes - head) / 16;
  for (uint64_t i = tid; i < nvec; i += nthreads) body[i] = make_uint4(0, 0, 0, 0);
  for (uint64_t i = head + nvec * 16 + tid; i < bytes; i += nthreads) dst[i] = 0;
}

// Whether [a, a + na) and [b, b + nb) share a byte.
__device__ inline bool overlaps(const char* a, uint64_t na, const char* b, uint64_t nb) {
  return a < b + nb && b < a + na;
}

// One launch's roles and buffers: bytes [lo, lo + len) of the block.
struct PermuteArgs {
  const char* in;
  char* out;
  uint64_t lo;
  uint64_t len;
  int32_t send_to;    // -1: none
  int32_t recv_from;  // -1: none (zeros)
};

__global__ void __launch_bounds__(kLLThreads) permute_ll_kernel(CollectiveContext c, PermuteArgs a) {
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uint64_t e = begin_launch(c);
  const uint32_t flag = static_cast<uint32_t>(e);
  const uint64_t base = ScratchLayout::of(c.scratch_bytes).ll(e);
  const Span s = split(a.len, blockIdx.x, gridDim.x, 16);
  const char* src = a.in + a.lo + s.lo;
  char* dst = a.out + a.lo + s.lo;
  if (s.size() != 0) {
    if (a.send_to >= 0 && a.send_to != c.rank)
      mem_channel(c, a.send_to, 0).put_packets<LL16Packet>(base + 2 * s.lo, src, s.size(), flag, tid, nt);
    __syncthreads();  // in place: the input is read before the output is written
    if (a.recv_from < 0) {
      if (a.out != nullptr) zero_bytes(dst, s.size(), tid, nt);
    } else if (a.recv_from == c.rank) {
      if (src != dst) copy_bytes(dst, src, s.size(), tid, nt);
    } else {
      read_packets(dst, packets_at(c.scratch, base + 2 * s.lo), s.size(), flag, tid, nt,
                   mem_channel(c, a.recv_from, 0).semaphore.site);
    }
  }
  finish_launch(c, e);
}

constexpr uint32_t kSenderThreads = kHBThreads / 2;

// One thread block's share of a streaming launch: part b of the block, its chunks, its slots in the receiver.
struct PermuteStream {
  CollectiveContext c;
  PermuteArgs a;
  StreamGeometry geo;
  uint64_t lo, hi;  // this thread block's byte range of the block
  uint64_t half;    // this launch's HB half (scratch offset)
  uint32_t chunks;

  __device__ PermuteStream(const CollectiveContext& ctx, const PermuteArgs& args, const StreamGeometry& g,
                           uint64_t e)
      : c(ctx), a(args), geo(g) {
    const Span s = part_of(args.len, blockIdx.x, g.part);
    lo = s.lo;
    hi = s.hi;
    half = ScratchLayout::of(ctx.scratch_bytes).hb(e);
    chunks = static_cast<uint32_t>(ceil_div(hi - lo, g.chunk));
  }
  __device__ Span chunk_of(uint32_t k) const {
    const uint64_t first = min_u64(lo + k * geo.chunk, hi);
    return {first, min_u64(first + geo.chunk, hi)};
  }
  // Slot (this thread block, k % S) of the receiver's HB half, as an offset (the same in every rank's scratch).
  __device__ uint64_t slot_offset(uint32_t k) const {
    return half + (static_cast<uint64_t>(blockIdx.x) * geo.slots + k % geo.slots) * geo.chunk;
  }
  __device__ const D2DSemaphoreDeviceHandle& semaphore(int peer, int kind) const {
    return stream_semaphore(c, peer, blockIdx.x, kind);
  }
};

__global__ void __launch_bounds__(kHBThreads) permute_stream_kernel(CollectiveContext c, PermuteArgs a,
                                                                    StreamGeometry geo) {
  const uint64_t e = begin_launch(c);
  const PermuteStream ps(c, a, geo, e);
  const bool sends = a.send_to >= 0 && a.send_to != c.rank;
  const bool receives = a.recv_from >= 0 && a.recv_from != c.rank;
  const bool alias = overlaps(a.in + a.lo, a.len, a.out + a.lo, a.len);
  __shared__ uint32_t sent;  // in place: chunks the senders have read (receivers write chunk k after it is sent)
  if (threadIdx.x == 0) sent = 0;
  __syncthreads();
  if (threadIdx.x < kSenderThreads) {
    const Group g{0, kSenderThreads, 1};
    if (sends) {
      for (uint32_t k = 0; k < ps.chunks; ++k) {
        if (k >= static_cast<uint32_t>(geo.slots) && g.tid() == 0) ps.semaphore(a.send_to, kStreamCredit).wait();
        g.sync();
        const Span s = ps.chunk_of(k);
        mem_channel(c, a.send_to, 0).put_from(ps.slot_offset(k), a.in + a.lo + s.lo, s.size(), g.tid(), g.count);
        g.sync();
        if (g.tid() == 0) {
          ps.semaphore(a.send_to, kStreamData).signal();
          if (alias) *reinterpret_cast<volatile uint32_t*>(&sent) = k + 1;
        }
      }
    } else if (alias && g.tid() == 0) {
      *reinterpret_cast<volatile uint32_t*>(&sent) = ps.chunks;
    }
  } else {
    const Group g{kSenderThreads, kHBThreads - kSenderThreads, 2};
    for (uint32_t k = 0; k < ps.chunks; ++k) {
      const Span s = ps.chunk_of(k);
      char* dst = a.out + a.lo + s.lo;
      if (receives && g.tid() == 0) ps.semaphore(a.recv_from, kStreamData).wait();
      if (alias && g.tid() == 0)
        while (*reinterpret_cast<volatile uint32_t*>(&sent) <= k) {
        }
      g.sync();
      if (receives) {
        copy_bytes(dst, c.scratch + ps.slot_offset(k), s.size(), g.tid(), g.count);
        g.sync();
        if (g.tid() == 0 && k + static_cast<uint32_t>(geo.slots) < ps.chunks)
          ps.semaphore(a.recv_from, kStreamCredit).signal();
      } else if (a.recv_from == c.rank) {
        if (!alias) copy_bytes(dst, a.in + a.lo + s.lo, s.size(), g.tid(), g.count);
      } else if (a.out != nullptr) {
        zero_bytes(dst, s.size(), g.tid(), g.count);
      }
    }
  }
  finish_launch(c, e);
}

PermuteArgs permute_args(const CollectiveContext& c, const Piece& p, const LaunchArgs& a) {
  return {p.in, p.out, p.lo, p.len, a.send_to, a.recv_from};
}

// LL: a receiver's packets fill its LL half from offset 0 (16 bytes of packets per 8 of data).
uint64_t piece_cap_ll(int32_t, int, uint64_t, uint64_t scratch_bytes, const StreamTuning&) {
  return round_down(ScratchLayout::of(scratch_bytes).ll_half / 2, 16);
}

cudaError_t launch_ll(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const int blocks = blocks_for(p.len, 4096, kLLMaxBlocks);
  permute_ll_kernel<<<blocks, kLLThreads, 0, stream>>>(c, permute_args(c, p, a));
  return cudaGetLastError();
}

// HB: the geometry of stream.cuh with one peer (a receiver holds slots for one sender).
StreamGeometry geometry(uint64_t bytes, uint64_t scratch_bytes, int max_blocks, const StreamTuning& tuning) {
  return stream_geometry(bytes, 2, ScratchLayout::of(scratch_bytes).hb_half, max_blocks, tuning);
}

uint64_t piece_cap_hb(int32_t, int, uint64_t block_bytes, uint64_t scratch_bytes, const StreamTuning& tuning) {
  return geometry(block_bytes, scratch_bytes, 1, tuning).blocks == 0 ? 0 : block_bytes;
}

cudaError_t ready_hb(const CollectiveContext& c, uint64_t) {
  return c.stream == nullptr || c.stream_blocks < 1 ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t launch_hb(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const int blocks = a.max_blocks > 0 && a.max_blocks < c.stream_blocks ? a.max_blocks : c.stream_blocks;
  const StreamGeometry geo = geometry(p.len, c.scratch_bytes, blocks, c.stream_tuning);
  if (geo.blocks == 0) return cudaErrorInvalidValue;
  permute_stream_kernel<<<geo.blocks, kHBThreads, 0, stream>>>(c, permute_args(c, p, a), geo);
  return cudaGetLastError();
}

constexpr Launcher kLL{piece_cap_ll, nullptr, launch_ll};
constexpr Launcher kHB{piece_cap_hb, ready_hb, launch_hb};

}  // namespace

JAX_MSCCLPP_LAUNCHER(kPointToPointLL) { return call.collective == codes::kPermute ? &kLL : nullptr; }

JAX_MSCCLPP_LAUNCHER(kPointToPointHB) { return call.collective == codes::kPermute ? &kHB : nullptr; }

JAX_MSCCLPP_LAUNCHER(kPointToPoint) {
  // The protocol by the call's block size, world and placement (selection.def, JAX_MSCCLPP_PROTOCOL_RULE).
  return protocol_algorithm(codes::kPointToPoint, call) == codes::kPointToPointLL ? launcher_kPointToPointLL(call)
                                                                                   : launcher_kPointToPointHB(call);
}

}  // namespace jax_mscclpp::collectives
