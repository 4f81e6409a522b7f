// launch_collective: finds the algorithm's launcher (algorithms.h) and issues its launches on the stream, one per
// piece of the call that fits the scratch (one epoch each; their number depends only on the sizes).
#include "collectives/collective.h"

#include "collectives/algorithms.h"
#include "jax_mscclpp/block_layout.h"

namespace jax_mscclpp {
namespace collectives {

// kPlan runs through the plan executor (kernels/executor/), never through launch_collective.
JAX_MSCCLPP_LAUNCHER(kPlan) { return nullptr; }

}  // namespace collectives

namespace {

using namespace collectives;

// The launcher of every algorithm row of codes.def, by code.
const Launcher* launcher_of(int32_t algorithm, const ProtocolCall& call) {
  switch (algorithm) {
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, ...) \
  case code:                                         \
    return launcher_##enumerator(call);
#include "jax_mscclpp/codes.def"
    default: return nullptr;
  }
}

bool valid_op(int32_t op) { return op == codes::kSum || op == codes::kMax || op == codes::kMin; }

}  // namespace

bool collective_supported(int32_t collective, int32_t algorithm, int32_t dtype, int32_t op) {
  if (dtype_bytes(dtype) == 0 || !is_collective(collective)) return false;
  if (collective_reduces(collective) && !valid_op(op)) return false;
  if (algorithm == codes::kInPlace) return in_place_supported(collective, dtype, op);
  // Whether an algorithm implements a collective does not depend on the call's shape (kAllPairs: either protocol).
  return launcher_of(algorithm, {collective, 0, 2, codes::kOwnGpu}) != nullptr;
}

uint64_t collective_launch_count(int32_t collective, int32_t algorithm, uint64_t block_count, int32_t dtype,
                                 int32_t nranks, int32_t placement, uint64_t scratch_bytes,
                                 const StreamTuning& tuning) {
  const uint64_t esize = dtype_bytes(dtype);
  if (esize == 0 || nranks < 1 || block_count == 0 || nranks == 1) return 0;
  const uint64_t bytes = block_count * esize;
  if (algorithm == codes::kInPlace) return nranks <= kDirectPeers && in_place_supported(collective, dtype, codes::kSum);
  const Launcher* l = launcher_of(algorithm, {collective, bytes, nranks, placement});
  if (l == nullptr) return 0;
  const uint64_t cap = l->piece_cap(collective, nranks, bytes, scratch_bytes, tuning);
  return cap == 0 ? 0 : ceil_div(bytes, cap);
}

namespace {

// launch_collective and launch_permute: `peers` carries the permutation's send_to / recv_from.
cudaError_t launch_pieces(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                          void* out, uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                          int32_t max_blocks, int32_t send_to, int32_t recv_from) {
  const uint64_t esize = dtype_bytes(dtype);
  if (esize == 0 || !collective_supported(collective, algorithm, dtype, op)) return cudaErrorInvalidValue;
  if (ctx.nranks < 1 || ctx.rank < 0 || ctx.rank >= ctx.nranks) return cudaErrorInvalidValue;
  const uint64_t bytes = block_count * esize;
  if (bytes == 0) return cudaSuccess;
  if (ctx.nranks == 1) {  // every collective of one rank is a copy of its one block (a permutation's: or zeros)
    if (collective == codes::kPermute && recv_from < 0)
      return out == nullptr ? cudaSuccess : cudaMemsetAsync(out, 0, bytes, stream);
    if (in == out) return cudaSuccess;
    return cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream);
  }
  if (algorithm == codes::kInPlace)
    return launch_in_place_posted(ctx, collective, in, out, block_count, dtype, op, stream, max_blocks);
  const Launcher* l = launcher_of(algorithm, {collective, bytes, ctx.nranks, ctx.placement});
  if (ctx.mem == nullptr || ctx.epoch == nullptr || ctx.channels_per_peer < 1) return cudaErrorNotReady;
  if (l->ready != nullptr) {
    const cudaError_t e = l->ready(ctx, bytes);
    if (e != cudaSuccess) return e;
  }
  const uint64_t cap = l->piece_cap(collective, ctx.nranks, bytes, ctx.scratch_bytes, ctx.stream_tuning);
  if (cap == 0) return cudaErrorInvalidValue;

  // Blocks as the collective's block layout (block_layout.h) places them: block q at q * bytes.
  Piece p;
  p.in = static_cast<const char*>(in);
  p.out = static_cast<char*>(out);
  p.in_stride = input_per_rank(collective) ? bytes : 0;
  p.out_stride = output_per_rank(collective) ? bytes : 0;
  const LaunchArgs args{collective, dtype, op, max_blocks, send_to, recv_from};
  CollectiveContext c = ctx;
  c.call = call_words(collective, op, algorithm, dtype, block_count);
  return launch_in_pieces(bytes, cap, [&](uint64_t lo, uint64_t len) {
    p.lo = lo;
    p.len = len;
    return l->launch(c, p, args, stream);
  });
}

}  // namespace

cudaError_t launch_collective(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                              void* out, uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                              int32_t max_blocks) {
  if (collective == codes::kPermute) return cudaErrorInvalidValue;  // its peers: launch_permute
  return launch_pieces(ctx, collective, algorithm, in, out, block_count, dtype, op, stream, max_blocks, -1, -1);
}

cudaError_t launch_permute(const CollectiveContext& ctx, int32_t algorithm, const void* in, void* out,
                           uint64_t block_count, int32_t dtype, int32_t send_to, int32_t recv_from,
                           cudaStream_t stream, int32_t max_blocks) {
  if (send_to < -1 || send_to >= ctx.nranks || recv_from < -1 || recv_from >= ctx.nranks) return cudaErrorInvalidValue;
  return launch_pieces(ctx, codes::kPermute, algorithm, in, out, block_count, dtype, codes::kSum, stream, max_blocks,
                       send_to, recv_from);
}

}  // namespace jax_mscclpp
