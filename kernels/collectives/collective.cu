// launch_collective: picks the algorithm's launcher and issues its launches on the stream. The streaming
// algorithms take one launch whatever the size; the LL, ring and switch algorithms cut a call
// into pieces that fit the scratch (one launch, one epoch each; their number depends only on the sizes).
#include "collectives/collective.h"

#include <cstdlib>

#include "collectives/algorithms.h"

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
  k1paHB = 9,
};

// all_gather / reduce_scatter / all_to_all under kAllPairs: LL up to this many bytes per block, HB above.
// (Virtual-ranks round trips on one H200: LL16 beats HB up to ~16-64 KiB; bench/collectives.py measures both.)
constexpr uint64_t kAllPairsLLMaxBytes = 16 << 10;

enum class Kind { kNone, k1paLL, kReduceLL, kCopyLL, kRing, kSwitch, kStreamReduce, kStreamCopy, kStreamTwoPhase };

bool valid_op(int32_t op) { return op == codes::kSum || op == codes::kMax || op == codes::kMin; }

Kind kind_of(int32_t collective, int32_t algorithm, uint64_t block_bytes) {
  if (collective == kAllReduceCode) {
    switch (algorithm) {
      case k1paLL: return Kind::k1paLL;
      case k2paLL: return Kind::kReduceLL;
      case k2paHB: return Kind::kStreamTwoPhase;
      case k1paHB: return Kind::kStreamReduce;
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
  if (collective == kReduceScatterCode) return ll ? Kind::kReduceLL : Kind::kStreamReduce;
  return ll ? Kind::kCopyLL : Kind::kStreamCopy;
}

bool streaming(Kind k) { return k == Kind::kStreamReduce || k == Kind::kStreamCopy || k == Kind::kStreamTwoPhase; }

uint64_t piece_cap(Kind k, int32_t collective, int nranks, uint64_t scratch_bytes) {
  const ScratchLayout s = ScratchLayout::of(scratch_bytes);
  switch (k) {
    case Kind::k1paLL: return piece_cap_1pa_ll(nranks, s);
    case Kind::kReduceLL: return piece_cap_reduce_ll(collective, nranks, s);
    case Kind::kCopyLL: return piece_cap_copy_ll(nranks, s);
    case Kind::kRing: return piece_cap_ring(nranks, s);
    case Kind::kSwitch: return piece_cap_switch(nranks, s);
    default: return 0;
  }
}

bool op_matters(int32_t collective) { return collective == kAllReduceCode || collective == kReduceScatterCode; }

// The streaming launches' tuning (docs/benchmarking.md, "Streaming geometry"): defaults from measurements on two
// H200s over NVLink; JAX_MSCCLPP_STREAM_{BLOCKS,BLOCK_BYTES,CHUNK,SLOTS} override them (read once per process).
const StreamTuning& stream_tuning() {
  static const StreamTuning tuning = [] {
    StreamTuning t{32 << 10, 128, 2, 256 << 10, 4};
    auto env = [](const char* name, uint64_t fallback) {
      const char* v = std::getenv(name);
      if (v == nullptr || *v == '\0') return fallback;
      const unsigned long long x = std::strtoull(v, nullptr, 10);
      return x == 0 ? fallback : static_cast<uint64_t>(x);
    };
    t.max_blocks = static_cast<int32_t>(env("JAX_MSCCLPP_STREAM_BLOCKS", t.max_blocks));
    t.block_bytes = env("JAX_MSCCLPP_STREAM_BLOCK_BYTES", t.block_bytes);
    t.max_chunk = round_up(env("JAX_MSCCLPP_STREAM_CHUNK", t.max_chunk), 16);
    t.slots = static_cast<int32_t>(env("JAX_MSCCLPP_STREAM_SLOTS", t.slots));
    return t;
  }();
  return tuning;
}

// The segment and geometry of a streaming call. 2PA-HB streams shards (a 1/n of the message each) and gives each
// of its two phases half of the HB half's slots; the others stream whole blocks through all of them.
struct StreamShape {
  uint64_t seg;
  uint64_t phase_bytes;  // slot bytes of one phase (the second phase's slots start there)
  StreamGeometry geo;
};

StreamShape stream_shape(Kind k, uint64_t bytes, int nranks, uint64_t scratch_bytes, int max_blocks) {
  const bool two = k == Kind::kStreamTwoPhase;
  const uint64_t seg = two ? round_up(ceil_div(bytes, nranks), 16) : bytes;
  const uint64_t phase = ScratchLayout::of(scratch_bytes).hb_half / (two ? 2 : 1);
  return {seg, phase, stream_geometry(seg, nranks, phase, max_blocks, stream_tuning())};
}

cudaError_t launch_piece(const CollectiveContext& c, Kind k, int32_t collective, const Piece& p, int32_t dtype,
                         int32_t op, cudaStream_t stream) {
  switch (k) {
    case Kind::k1paLL: return launch_all_reduce_1pa_ll(c, p, dtype, op, stream);
    case Kind::kReduceLL: return launch_all_pairs_reduce_ll(c, p, collective, dtype, op, stream);
    case Kind::kCopyLL: return launch_all_pairs_copy_ll(c, p, collective, stream);
    case Kind::kRing: return launch_all_reduce_ring(c, p, dtype, op, stream);
    case Kind::kSwitch: return launch_all_reduce_switch(c, p, dtype, op, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The streaming launch of one call (layouts: collective.h; segments: stream.cuh).
cudaError_t launch_streaming(const CollectiveContext& c, Kind k, int32_t collective, const char* in, char* out,
                             uint64_t bytes, int32_t dtype, int32_t op, cudaStream_t stream, int max_blocks) {
  const int n = c.nranks;
  const StreamShape s = stream_shape(k, bytes, n, c.scratch_bytes, max_blocks);
  const StreamGeometry& geo = s.geo;
  if (geo.blocks == 0) return cudaErrorInvalidValue;
  if (k == Kind::kStreamTwoPhase) {  // 2PA-HB: reduce shard r of every rank into my shard, then share it
    const uint64_t shard = s.seg;
    const StreamArgs reduce{in, shard, out + c.rank * shard, 0, shard, bytes, geo, 0};
    const StreamArgs gather{out + c.rank * shard, 0, out, shard, shard, bytes, geo, s.phase_bytes};
    return launch_stream_two_phase(c, reduce, gather, dtype, op, stream);
  }
  const uint64_t total = n * bytes;  // every segment whole
  if (k == Kind::kStreamReduce) {
    const uint64_t stride = collective == kReduceScatterCode ? bytes : 0;  // all_reduce 1PA-HB: the whole input
    return launch_stream_reduce(c, StreamArgs{in, stride, out, 0, bytes, total, geo, 0}, dtype, op, stream);
  }
  const uint64_t stride = collective == kAllToAllCode ? bytes : 0;  // all_gather: the input to every peer
  return launch_stream_copy(c, StreamArgs{in, stride, out, bytes, bytes, total, geo, 0}, stream);
}

}  // namespace

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
  if (streaming(k))  // one launch whatever the size; whether it runs at all does not depend on the grid
    return stream_shape(k, bytes, nranks, scratch_bytes, 1).geo.blocks == 0 ? 0 : 1;
  if (k == Kind::kSwitch && nranks > kMaxSwitchMembers) return 0;
  const uint64_t cap = piece_cap(k, collective, nranks, scratch_bytes);
  return cap == 0 ? 0 : ceil_div(bytes, cap);
}

cudaError_t launch_collective(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                              void* out, uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                              int32_t max_blocks) {
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
  if (ctx.mem == nullptr || ctx.epoch == nullptr || ctx.channels_per_peer < 1) return cudaErrorNotReady;
  if (streaming(k)) {
    if (ctx.stream == nullptr || ctx.stream_blocks < 1) return cudaErrorNotReady;
    const int blocks = max_blocks > 0 && max_blocks < ctx.stream_blocks ? max_blocks : ctx.stream_blocks;
    return launch_streaming(ctx, k, collective, static_cast<const char*>(in), static_cast<char*>(out), bytes, dtype,
                            op, stream, blocks);
  }
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
    const cudaError_t e = launch_piece(ctx, k, collective, p, dtype, op, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace jax_mscclpp
