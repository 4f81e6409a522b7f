// launch_collective: picks the algorithm's launcher, cuts the call into pieces that fit the scratch (one launch,
// one epoch each; their number depends only on the sizes) and issues them on the stream.
#include "collectives/collective.h"

#include "collectives/algorithms.h"
#include "collectives/all_reduce_1pa_ll.h"

namespace jax_mscclpp {
namespace {

using namespace collectives;

// Algorithm codes (ffi/collective_types.h, Algorithm).
enum : int32_t {
  k1paLL = 0,
  k2paLL = 1,
  k2paHB = 2,
  k2pr = 3,
  k2paNvls = 4,
  kAllPairs = 5,
  kAllPairsLL = 7,
  kAllPairsHB = 8,
};

// all_gather / reduce_scatter / all_to_all under kAllPairs: LL up to this many bytes per block, HB above.
// (Virtual-ranks round trips on one H200: LL16 beats HB up to ~16-64 KiB; bench/collectives.py measures both.)
constexpr uint64_t kAllPairsLLMaxBytes = 16 << 10;

enum class Kind { kNone, k1paLL, kReduceLL, kReduceHB, kCopyLL, kCopyHB, kRing, kSwitch };

bool valid_op(int32_t op) { return op == codes::kSum || op == codes::kMax || op == codes::kMin; }

Kind kind_of(int32_t collective, int32_t algorithm, uint64_t block_bytes) {
  if (collective == kAllReduceCode) {
    switch (algorithm) {
      case k1paLL: return Kind::k1paLL;
      case k2paLL: return Kind::kReduceLL;
      case k2paHB: return Kind::kReduceHB;
      case k2pr: return Kind::kRing;
      case k2paNvls: return Kind::kSwitch;
      default: return Kind::kNone;
    }
  }
  if (collective != kAllGatherCode && collective != kReduceScatterCode && collective != kAllToAllCode)
    return Kind::kNone;
  bool ll;
  switch (algorithm) {
    case kAllPairs: ll = block_bytes <= kAllPairsLLMaxBytes; break;
    case kAllPairsLL: ll = true; break;
    case kAllPairsHB: ll = false; break;
    default: return Kind::kNone;
  }
  if (collective == kReduceScatterCode) return ll ? Kind::kReduceLL : Kind::kReduceHB;
  return ll ? Kind::kCopyLL : Kind::kCopyHB;
}

uint64_t piece_cap(Kind k, int32_t collective, int nranks, uint64_t scratch_bytes) {
  const ScratchLayout s = ScratchLayout::of(scratch_bytes);
  switch (k) {
    case Kind::k1paLL: return piece_cap_1pa_ll(nranks, s);
    case Kind::kReduceLL: return piece_cap_reduce_ll(collective, nranks, s);
    case Kind::kReduceHB: return piece_cap_reduce_hb(collective, nranks, s);
    case Kind::kCopyLL: return piece_cap_copy_ll(nranks, s);
    case Kind::kCopyHB: return piece_cap_copy_hb(nranks, s);
    case Kind::kRing: return piece_cap_ring(nranks, s);
    case Kind::kSwitch: return piece_cap_switch(nranks, s);
    default: return 0;
  }
}

bool op_matters(int32_t collective) { return collective == kAllReduceCode || collective == kReduceScatterCode; }

cudaError_t launch_piece(const CollectiveContext& c, Kind k, int32_t collective, const Piece& p, int32_t dtype,
                         int32_t op, uint64_t esize, cudaStream_t stream) {
  switch (k) {
    case Kind::k1paLL: {
      const ScratchLayout s = ScratchLayout::of(c.scratch_bytes);
      AllReduce1paLLArgs a;
      a.rank = c.rank;
      a.nranks = c.nranks;
      a.channels = c.mem;
      a.channels_per_peer = c.channels_per_peer;
      a.scratch = c.scratch;  // the LL halves start at the scratch's start
      a.scratch_bytes = 2 * s.ll_half;
      a.epoch = c.epoch;
      a.blocks_done = c.blocks_done;
      a.half_bytes = s.ll_half;
      return launch_all_reduce_1pa_ll(a, p.in + p.lo, p.out + p.lo, p.len / esize, dtype, op, 0, 0, stream);
    }
    case Kind::kReduceLL: return launch_all_pairs_reduce_ll(c, p, collective, dtype, op, stream);
    case Kind::kReduceHB: return launch_all_pairs_reduce_hb(c, p, collective, dtype, op, stream);
    case Kind::kCopyLL: return launch_all_pairs_copy_ll(c, p, collective, stream);
    case Kind::kCopyHB: return launch_all_pairs_copy_hb(c, p, collective, stream);
    case Kind::kRing: return launch_all_reduce_ring(c, p, dtype, op, stream);
    case Kind::kSwitch: return launch_all_reduce_switch(c, p, dtype, op, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

namespace collectives {
uint64_t piece_cap_1pa_ll(int nranks, const ScratchLayout& s) {
  // Each half holds n slots of packets, 16 bytes per 8 of data (all_reduce_1pa_ll.cu).
  return round_down(s.ll_half / (2 * static_cast<uint64_t>(nranks)), 16);
}
}  // namespace collectives

bool collective_supported(int32_t collective, int32_t algorithm, int32_t dtype, int32_t op) {
  if (dtype_bytes(dtype) == 0) return false;
  if (op_matters(collective) && !valid_op(op)) return false;
  // The protocol choice of kAllPairs does not change what is supported: ask with the LL variant.
  return kind_of(collective, algorithm, 0) != Kind::kNone;
}

uint64_t collective_launch_count(int32_t collective, int32_t algorithm, uint64_t block_count, int32_t dtype,
                                 int32_t nranks, uint64_t scratch_bytes) {
  const uint64_t esize = dtype_bytes(dtype);
  if (esize == 0 || nranks < 1 || block_count == 0 || nranks == 1) return 0;
  const uint64_t bytes = block_count * esize;
  const Kind k = kind_of(collective, algorithm, bytes);
  if (k == Kind::kNone) return 0;
  if (k == Kind::kSwitch && nranks > kMaxSwitchMembers) return 0;
  const uint64_t cap = piece_cap(k, collective, nranks, scratch_bytes);
  return cap == 0 ? 0 : ceil_div(bytes, cap);
}

cudaError_t launch_collective(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                              void* out, uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream) {
  const uint64_t esize = dtype_bytes(dtype);
  if (esize == 0 || !collective_supported(collective, algorithm, dtype, op)) return cudaErrorInvalidValue;
  if (ctx.nranks < 1 || ctx.rank < 0 || ctx.rank >= ctx.nranks) return cudaErrorInvalidValue;
  const uint64_t bytes = block_count * esize;
  if (bytes == 0) return cudaSuccess;
  const int n = ctx.nranks;
  if (n == 1) {  // every collective of one rank is a copy of its one block
    if (in == out) return cudaSuccess;
    return cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream);
  }
  const Kind k = kind_of(collective, algorithm, bytes);
  if (ctx.mem == nullptr || ctx.epoch == nullptr || ctx.blocks_done == nullptr || ctx.channels_per_peer < 1)
    return cudaErrorNotReady;
  if (k == Kind::kRing && ctx.port == nullptr) return cudaErrorNotReady;
  if (k == Kind::kSwitch) {
    if (ctx.sw.multicast == nullptr && (ctx.sw.members == nullptr || n > kMaxSwitchMembers)) return cudaErrorNotReady;
    if (ctx.sw.multicast != nullptr && bytes % 16 != 0) return cudaErrorNotReady;
  }
  const uint64_t cap = piece_cap(k, collective, n, ctx.scratch_bytes);
  if (cap == 0) return cudaErrorInvalidValue;

  Piece p;
  p.in = static_cast<const char*>(in);
  p.out = static_cast<char*>(out);
  p.in_stride = collective == kReduceScatterCode || collective == kAllToAllCode ? bytes : 0;
  p.out_stride = collective == kAllGatherCode || collective == kAllToAllCode ? bytes : 0;
  for (uint64_t lo = 0; lo < bytes; lo += cap) {
    p.lo = lo;
    p.len = min_u64(cap, bytes - lo);
    const cudaError_t e = launch_piece(ctx, k, collective, p, dtype, op, esize, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace jax_mscclpp
