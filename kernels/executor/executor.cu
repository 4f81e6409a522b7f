// The plan executor's host side: sizes, pieces, and the launch of the plan kernel (plan_kernel.cuh) for the
// call's dtype and reduction.
#include "executor/executor.h"

#include <vector>

#include "collectives/collective_common.cuh"
#include "executor/plan_kernel.h"
#include "jax_mscclpp/reduce.cuh"

namespace jax_mscclpp {

uint32_t plan_dtype_bytes(int32_t dtype) { return static_cast<uint32_t>(dtype_bytes(dtype)); }

namespace {

struct Region {
  uint64_t half0, half1, half_bytes;
};

Region region_of(const DevicePlan& plan, uint64_t scratch_bytes) {
  const collectives::ScratchLayout s = collectives::ScratchLayout::of(scratch_bytes);
  if (plan.packets != 0) return Region{s.ll(0), s.ll(1), s.ll_half};
  return Region{s.hb(0), s.hb(1), s.hb_half};
}

uint64_t chunks_per_half(const DevicePlan& plan) {
  return static_cast<uint64_t>(plan.scratch_chunks) + static_cast<uint64_t>(plan.staging_chunks);
}

}  // namespace

uint64_t plan_region_half_bytes(const DevicePlan& plan, uint64_t scratch_bytes) {
  return region_of(plan, scratch_bytes).half_bytes;
}

uint64_t plan_half_bytes_needed(const DevicePlan& plan, uint64_t block_count, int32_t dtype) {
  const uint32_t es = plan_dtype_bytes(dtype);
  const uint64_t ce = plan_chunk_elements(block_count, plan.chunks_per_block);
  return chunks_per_half(plan) * plan_chunk_stride(ce, es == 0 ? 1 : es, plan.packets != 0);
}

uint64_t plan_piece_elements(const DevicePlan& plan, uint64_t scratch_bytes, int32_t dtype) {
  const uint32_t es = plan_dtype_bytes(dtype);
  if (es == 0) return 0;
  const uint64_t chunks = chunks_per_half(plan);
  const uint64_t cpb = static_cast<uint64_t>(plan.chunks_per_block);
  if (chunks == 0) return ~uint64_t{0} / 2 / cpb * cpb / 16 * 16;  // no scratch: any size in one launch
  // Largest stride that fits, then the most elements per chunk it carries.
  const uint64_t stride = region_of(plan, scratch_bytes).half_bytes / chunks / 16 * 16;
  const uint64_t ce = plan.packets != 0 ? stride / 2 / es : stride / es;
  // Whole multiples of 16 elements and of the chunks per block: pieces keep their 16-byte alignment.
  uint64_t piece = ce * cpb;
  const uint64_t unit = 16 * cpb;
  piece = piece / unit * unit;
  return piece;
}

uint64_t plan_launch_count(const DevicePlan& plan, uint64_t scratch_bytes, uint64_t block_count, int32_t dtype) {
  if (block_count == 0) return 0;
  if (plan_half_bytes_needed(plan, block_count, dtype) <= plan_region_half_bytes(plan, scratch_bytes)) return 1;
  const uint64_t piece = plan_piece_elements(plan, scratch_bytes, dtype);
  return piece == 0 ? 0 : (block_count + piece - 1) / piece;
}

uint64_t plan_scratch_bytes_for(const DevicePlan& plan, uint64_t block_count, int32_t dtype) {
  const uint64_t need = (plan_half_bytes_needed(plan, block_count, dtype) + 255) / 256 * 256;
  // LL halves are min(scratch / 4, 4 MiB), HB halves what remains: grow until the plan's half fits.
  uint64_t bytes = 2 * need + 1024;
  if (plan.packets == 0) bytes += 2 * collectives::kLLHalfCap;
  while (plan_region_half_bytes(plan, bytes) < need) bytes += bytes / 8 + 1024;
  return bytes;
}

cudaError_t launch_plan(const CollectiveContext& ctx, const DevicePlan& plan, const void* in, void* out,
                        uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream) {
  const uint32_t es = plan_dtype_bytes(dtype);
  if (es == 0 || plan.n_threadblocks < 1 || plan.threads < 1 || plan.threads > kPlanMaxThreads)
    return cudaErrorInvalidValue;
  if (op != codes::kSum && op != codes::kMax && op != codes::kMin) return cudaErrorInvalidValue;
  if (plan.port_channels > 0 && (ctx.port == nullptr || ctx.scratch_bytes >= (uint64_t{1} << 32)))
    return cudaErrorNotReady;
  if (plan.switch_channels > 0 && ctx.sw.multicast == nullptr && ctx.sw.members == nullptr)
    return cudaErrorNotReady;
  if (block_count == 0) return cudaSuccess;
  const uint64_t launches = plan_launch_count(plan, ctx.scratch_bytes, block_count, dtype);
  if (launches == 0) return cudaErrorInvalidValue;
  const uint64_t piece = launches == 1 ? block_count : plan_piece_elements(plan, ctx.scratch_bytes, dtype);
  const Region reg = region_of(plan, ctx.scratch_bytes);
  CollectiveContext c = ctx;
  c.call = call_words(plan.collective, op, codes::kPlan, dtype, block_count, plan.fingerprint);
  cudaError_t result = cudaSuccess;
  const bool known = dispatch_dtype_op(dtype, op, [&](auto t, auto o) {
    using T = decltype(t);
    using Op = decltype(o);
    result = collectives::launch_in_pieces(block_count, piece, [&](uint64_t lo, uint64_t len) {
      const PlanPiece p{static_cast<const char*>(in) + lo * es, static_cast<char*>(out) + lo * es, len, block_count,
                        reg.half0, reg.half1};
      return launch_plan_piece<T, Op>(c, plan, p, stream);
    });
  });
  return known ? result : cudaErrorInvalidValue;
}

int plan_resident_blocks(const DevicePlan& plan, int32_t dtype, int32_t op) {
  int device = 0, multiprocessors = 0, per_multiprocessor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;
  cudaError_t result = cudaErrorInvalidValue;
  dispatch_dtype_op(dtype, op, [&](auto t, auto o) {
    result = plan_blocks_per_multiprocessor<decltype(t), decltype(o)>(plan, &per_multiprocessor);
  });
  return result == cudaSuccess ? multiprocessors * per_multiprocessor : 0;
}

int plan_resident_blocks_for_every_call(const DevicePlan& plan) {
  std::vector<int32_t> dtypes, ops;
#define JAX_MSCCLPP_DTYPE(enumerator, ...) dtypes.push_back(codes::enumerator);
#define JAX_MSCCLPP_REDUCE_OP(enumerator, ...) ops.push_back(codes::enumerator);
#include "jax_mscclpp/codes.def"
  int least = 0;
  for (int32_t dtype : dtypes)
    for (int32_t op : ops)
      if (const int holds = plan_resident_blocks(plan, dtype, op); holds > 0 && (least == 0 || holds < least))
        least = holds;
  return least;
}

}  // namespace jax_mscclpp
