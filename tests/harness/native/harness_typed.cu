// Harness kernels specialized on (dtype, reduction): reduce_put, SwitchChannel (emulated) all-reduce, the
// local N-input reduce, and the 1PA-LL all_reduce collective. Specialized through the one dispatch switch of
// reduce.cuh.
#include "harness_kernels.cuh"
#include "collectives/algorithms.h"
#include "collectives/epilogue.h"

namespace jax_mscclpp::cuda {
namespace {

using namespace harness;

constexpr int kMaxHarnessSources = 16;

// Rank r reduces its nsrc input slices (slot_stride bytes apart) into rank r+1's scratch at dst_off, then
// copies what rank r-1 sent it to its output.
template <class T, class Op>
__global__ void __launch_bounds__(1024) reduce_put_kernel(RankArgs a, HarnessParams p) {
  const int r = a.rank, n = a.nranks, b = blockIdx.x;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const Slice s = block_slice(p.count, b, gridDim.x, 16 / sizeof(T));
  const T* srcs[kMaxHarnessSources];
  const int nsrc = p.nsrc < kMaxHarnessSources ? p.nsrc : kMaxHarnessSources;
  for (int k = 0; k < nsrc; ++k) srcs[k] = reinterpret_cast<const T*>(a.input + k * p.slot_stride) + s.lo;
  mem(a, next, b).reduce_put<T, Op>(p.dst_off + s.lo * sizeof(T), srcs, nsrc, s.size(), threadIdx.x, blockDim.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    mem(a, next, b).signal();
    mem(a, prev, b).wait();
  }
  __syncthreads();
  copy_bytes(a.output + s.lo * sizeof(T), a.scratch + p.dst_off + s.lo * sizeof(T), s.size() * sizeof(T),
             threadIdx.x, blockDim.x);
}

// All-reduce of every rank's scratch[0, count) through the SwitchChannel: rank r owns chunk r; block b
// handles part b of every chunk, so only blocks b of all ranks need to meet in a barrier.
template <class T, class Op>
__global__ void __launch_bounds__(1024) switch_all_reduce_kernel(RankArgs a, HarnessParams p) {
  constexpr uint64_t L = 16 / sizeof(T);
  const int r = a.rank, n = a.nranks, b = blockIdx.x;
  barrier_all(a, b);
  const Slice c = block_slice(p.count, r, n, L);
  const Slice s = block_slice(c.size(), b, gridDim.x, L);
  const uint64_t first = c.lo + s.lo;
  if (p.mode == 0) {
    a.sw.reduce_broadcast<T, Op>(first * sizeof(T), s.size(), threadIdx.x, blockDim.x);
  } else {
    T* staged = reinterpret_cast<T*>(a.output) + first;
    a.sw.reduce<T, Op>(staged, first * sizeof(T), s.size(), threadIdx.x, blockDim.x);
    __syncthreads();
    a.sw.broadcast<T>(p.dst_off + first * sizeof(T), staged, s.size(), threadIdx.x, blockDim.x);
  }
  barrier_all(a, b);
  const uint64_t region = p.mode == 0 ? 0 : p.dst_off;
  for (int q = 0; q < n; ++q) {
    const Slice cq = block_slice(p.count, q, n, L);
    const Slice sq = block_slice(cq.size(), b, gridDim.x, L);
    const uint64_t o = (cq.lo + sq.lo) * sizeof(T);
    copy_bytes(a.output + o, a.scratch + region + o, sq.size() * sizeof(T), threadIdx.x, blockDim.x);
  }
}

// output <- reduce of nsrc slices of input, whole grid. kMax sources per pass: 4 (up to two blocks of 512
// threads per multiprocessor) when nsrc <= 4, else 8.
template <class T, class Op, int kMax>
__global__ void __launch_bounds__(512, kMax <= 4 ? 2 : 1) reduce_local_kernel(RankArgs a, HarnessParams p) {
  const T* srcs[kMaxHarnessSources];
  const int nsrc = p.nsrc < kMaxHarnessSources ? p.nsrc : kMaxHarnessSources;
  for (int k = 0; k < nsrc; ++k) srcs[k] = reinterpret_cast<const T*>(a.input + k * p.slot_stride);
  for (int it = 0; it < p.iters; ++it)
    reduce_elements<T, Op, kMax>(reinterpret_cast<T*>(a.output), srcs, nsrc, p.count,
                                 blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

// The harness instantiates reduce_put and the SwitchChannel test for the cases the tests use (every dtype
// goes through reduce_local), to keep the build short.
template <class T, class Op>
constexpr bool kReducePutCase = std::is_same_v<Op, SumOp> || std::is_same_v<T, float>;
template <class T, class Op>
constexpr bool kSwitchCase = std::is_same_v<T, float> || std::is_same_v<T, __half> ||
                             std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, int32_t> ||
                             ((std::is_same_v<T, double> || std::is_same_v<T, uint64_t>) && std::is_same_v<Op, SumOp>);

}  // namespace

cudaError_t launch_harness_typed(const RankArgs& a, const HarnessParams& p, cudaStream_t stream) {
  const dim3 grid(p.blocks), block(p.threads);
  const auto op = static_cast<HarnessOp>(p.op);
  const CollectiveContext& c = a.collective;
  if (op == HarnessOp::kAllReduce1paLL) {
    const uint64_t bytes = p.count * dtype_bytes(p.dtype);
    collectives::Piece piece{a.input, a.output, 0, 0, 0, bytes};
    const collectives::LaunchArgs args{codes::kAllReduce, p.dtype, p.reduce_op, 0};
    const collectives::ProtocolCall call{codes::kAllReduce, bytes, c.nranks, c.placement};
    return collectives::launcher_kOnePhaseAllPairsLL(call)->launch(c, piece, args, stream);
  }
  if (op == HarnessOp::kAllReduceEpilogue) {
    const uint64_t es = dtype_bytes(p.dtype);
    EpilogueCall call{a.input, a.input + p.count * es, a.input + 2 * p.count * es, a.output, a.output + p.count * es,
                      p.count, p.bytes, 1e-6f};
    return launch_all_reduce_epilogue(c, p.mode == 0 ? Epilogue::kResidual : Epilogue::kResidualRMSNorm, call,
                                      p.dtype, stream);
  }
  if (op == HarnessOp::kPermute) {
    auto destination = [&](int r) -> int32_t {
      const uint64_t word = r < 8 ? p.destinations_lo : p.destinations_hi;
      const uint32_t d = static_cast<uint32_t>(word >> (8 * (r % 8)) & 0xff);
      return r >= 16 || d == 0xff ? -1 : static_cast<int32_t>(d);
    };
    int32_t recv_from = -1;
    for (int q = 0; q < a.nranks; ++q)
      if (destination(q) == a.rank) recv_from = q;
    for (int i = 0; i < (p.iters > 1 ? p.iters : 1); ++i) {
      const cudaError_t e = launch_permute(c, p.algorithm, a.input + p.src_off, a.output + p.dst_off, p.count,
                                           p.dtype, destination(a.rank), recv_from, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  if (op == HarnessOp::kCollective) {
    for (int i = 0; i < (p.iters > 1 ? p.iters : 1); ++i) {
      const cudaError_t e = launch_collective(c, p.collective, p.algorithm, a.input + p.src_off, a.output + p.dst_off,
                                              p.count, p.dtype, p.reduce_op, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  cudaError_t result = cudaSuccess;
  const bool known = dispatch_dtype_op(p.dtype, p.reduce_op, [&](auto t, auto o) {
    using T = decltype(t);
    using Op = decltype(o);
    switch (op) {
      case HarnessOp::kReducePut:
        if constexpr (kReducePutCase<T, Op>) {
          reduce_put_kernel<T, Op><<<grid, block, 0, stream>>>(a, p);
          break;
        }
        result = cudaErrorInvalidValue;
        return;
      case HarnessOp::kSwitchAllReduce:
        if constexpr (kSwitchCase<T, Op>) {
          switch_all_reduce_kernel<T, Op><<<grid, block, 0, stream>>>(a, p);
          break;
        }
        result = cudaErrorInvalidValue;
        return;
      case HarnessOp::kReduceLocal:
        if (p.nsrc <= 4) {
          reduce_local_kernel<T, Op, 4><<<grid, block, 0, stream>>>(a, p);
        } else {
          reduce_local_kernel<T, Op, 8><<<grid, block, 0, stream>>>(a, p);
        }
        break;
      default: result = cudaErrorInvalidValue; return;
    }
    result = cudaGetLastError();
  });
  return known ? result : cudaErrorInvalidValue;
}

}  // namespace jax_mscclpp::cuda
