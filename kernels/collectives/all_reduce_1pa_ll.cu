// all_reduce, one phase, all pairs, LL protocol (1PA-LL): for small messages, where one flag trip between
// ranks is the whole cost. Also its fused forms with an epilogue over rows (residual add, RMSNorm).
//
// Every rank writes its whole input as LL16 packets into every peer's scratch (slot = its rank, in the LL half
// of this launch's epoch), then reduces, for each packet, its own input with the packets of every peer, in rank
// order 0..n-1, so that all ranks produce bit-identical results. No semaphore is touched: each packet's flag
// (this launch's epoch) is its own signal. What the latency depends on is kept off the path to the first
// store: peers' scratch pointers come in the kernel arguments (CollectiveContext::peer_scratch), and the epoch is
// a replicated per-block word with no atomic or fence at the end (jax_mscclpp/epoch.cuh).
//
// Scratch reuse: a writer of launch e + 2 has completed launch e + 1, which read packets every peer wrote in
// launch e + 1, so every peer had finished launch e (stream order) and read every packet of half (e & 1).
#include "collectives/algorithms.h"
#include "collectives/epilogue.h"

namespace jax_mscclpp::collectives {
namespace {

constexpr uint64_t kPayload = LL16Packet::kPayloadBytes;

JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t slot_bytes(uint64_t bytes) {
  return round_up(packet_buffer_bytes<LL16Packet>(bytes), 16);
}

template <class T, class Op>
__global__ void __launch_bounds__(1024) all_reduce_1pa_ll_kernel(CollectiveContext c, Piece p) {
  const int r = c.rank, n = c.nranks;
  const uint64_t e = begin_launch(c);
  const uint32_t flag = static_cast<uint32_t>(e);
  const char* in = p.in + p.lo;
  char* out = p.out + p.lo;
  const uint64_t bytes = p.len;
  const uint64_t slot = slot_bytes(bytes);
  const uint64_t half = ScratchLayout::of(c.scratch_bytes).ll(e);

  // This block's part of the message, in whole 16-byte units (two packets), the same split on every rank.
  const Span part = split(bytes, blockIdx.x, gridDim.x, 16);
  const uint64_t first_packet = part.lo / kPayload;

  // 1. My part, as packets, into my slot of every peer's scratch.
  for (int k = 1; k < n; ++k) {
    const int q = (r + k) % n;
    put_packets(reinterpret_cast<LL16Packet*>(remote_scratch(c, q) + half + r * slot) + first_packet, in + part.lo,
                part.size(), flag, threadIdx.x, blockDim.x);
  }

  // 2. Reduce packet by packet, in rank order, with 8 bytes of my own input in place of my slot.
  const uint64_t npackets = ceil_div(part.size(), kPayload);
  for (uint64_t i = threadIdx.x; i < npackets; i += blockDim.x) {
    const uint64_t off = part.lo + i * kPayload;
    const uint32_t valid = static_cast<uint32_t>(min_u64(kPayload, bytes - off));
    const uint2 mine = load8(in + off, valid);
    VecAccumulator<T, Op> acc;
    for (int q = 0; q < n; ++q) {
      uint2 v = mine;
      if (q != r) {
        const LL16Packet* pk = reinterpret_cast<const LL16Packet*>(c.scratch + half + q * slot) + first_packet + i;
        v = pk->read(flag, mem_channel(c, q, 0).semaphore.site);
      }
      const uint4 wide = make_uint4(v.x, v.y, 0, 0);  // the upper 8 bytes ride along unused
      if (q == 0) {
        acc.init(wide);
      } else {
        acc.add(wide);
      }
    }
    const uint4 res = acc.result();
    store8(out + off, make_uint2(res.x, res.y), valid);
  }
  finish_launch(c, e);
}

// Fused all_reduce (sum) + epilogue over rows: block b handles rows b, b + G, ...; thread t vectors t, t + T, ...
// (kV of them at most) of a row. All packets of the block's rows go out before the first is read. The sum is
// rounded to T before the epilogue, as the unfused composition rounds the all_reduce's result.
template <class T, bool kNorm, int kV>
__global__ void __launch_bounds__(1024) all_reduce_rows_kernel(CollectiveContext c, EpilogueCall a) {
  using Tr = ReduceTraits<T>;
  constexpr int kLanes = 16 / sizeof(T);
  const int r = c.rank, n = c.nranks;
  const uint64_t e = begin_launch(c);
  const uint32_t flag = static_cast<uint32_t>(e);
  const uint64_t bytes = a.count * sizeof(T);
  const uint64_t slot = slot_bytes(bytes);
  const uint64_t half = ScratchLayout::of(c.scratch_bytes).ll(e);
  const uint64_t row_vecs = a.row * sizeof(T) / 16;
  const uint64_t rows = a.count / a.row;
  const uint4* x = static_cast<const uint4*>(a.x);

  for (uint64_t row = blockIdx.x; row < rows; row += gridDim.x) {
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const uint64_t i = threadIdx.x + static_cast<uint64_t>(j) * blockDim.x;
      if (i >= row_vecs) break;
      const uint64_t v = row * row_vecs + i;
      const uint4 val = x[v];
      for (int k = 1; k < n; ++k) {
        LL16Packet* pk = reinterpret_cast<LL16Packet*>(remote_scratch(c, (r + k) % n) + half + r * slot) + 2 * v;
        pk[0].write(make_uint2(val.x, val.y), flag);
        pk[1].write(make_uint2(val.z, val.w), flag);
      }
    }
  }

  __shared__ float warp_sums[32];
  for (uint64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float vals[kV][kLanes];
    float sumsq = 0.f;
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const uint64_t i = threadIdx.x + static_cast<uint64_t>(j) * blockDim.x;
      if (i >= row_vecs) break;
      const uint64_t v = row * row_vecs + i;
      VecAccumulator<T, SumOp> acc;
      for (int q = 0; q < n; ++q) {
        uint4 w;
        if (q == r) {
          w = x[v];
        } else {
          const LL16Packet* pk = reinterpret_cast<const LL16Packet*>(c.scratch + half + q * slot) + 2 * v;
          const WaitSite& site = mem_channel(c, q, 0).semaphore.site;
          const uint2 lo = pk[0].read(flag, site), hi = pk[1].read(flag, site);
          w = make_uint4(lo.x, lo.y, hi.x, hi.y);
        }
        if (q == 0) {
          acc.init(w);
        } else {
          acc.add(w);
        }
      }
      const uint4 sum = acc.result();
      const uint4 res = static_cast<const uint4*>(a.residual)[v];
      const T* s = reinterpret_cast<const T*>(&sum);
      const T* rs = reinterpret_cast<const T*>(&res);
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int l = 0; l < kLanes; ++l) {
        o[l] = Tr::narrow(static_cast<float>(Tr::widen(rs[l])) + static_cast<float>(Tr::widen(s[l])));
        const float f = static_cast<float>(Tr::widen(o[l]));
        vals[j][l] = f;
        sumsq += f * f;
      }
      static_cast<uint4*>(a.new_residual)[v] = out;
    }
    if constexpr (kNorm) {
      for (int off = 16; off > 0; off /= 2) sumsq += __shfl_xor_sync(0xffffffffu, sumsq, off);
      if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = sumsq;
      __syncthreads();
      float total = 0.f;
      for (uint32_t w = 0; w < (blockDim.x + 31) / 32; ++w) total += warp_sums[w];
      __syncthreads();  // warp_sums is rewritten for the next row
      const float inv = rsqrtf(total / static_cast<float>(a.row) + a.eps);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const uint64_t i = threadIdx.x + static_cast<uint64_t>(j) * blockDim.x;
        if (i >= row_vecs) break;
        const uint4 wv = static_cast<const uint4*>(a.weight)[i];
        const T* w = reinterpret_cast<const T*>(&wv);
        uint4 out;
        T* o = reinterpret_cast<T*>(&out);
#pragma unroll
        for (int l = 0; l < kLanes; ++l) o[l] = Tr::narrow((vals[j][l] * inv) * static_cast<float>(Tr::widen(w[l])));
        static_cast<uint4*>(a.normed)[row * row_vecs + i] = out;
      }
    }
  }
  finish_launch(c, e);
}

template <class T, bool kNorm>
cudaError_t launch_rows(const CollectiveContext& c, const EpilogueCall& a, cudaStream_t stream) {
  const uint64_t row_vecs = a.row * sizeof(T) / 16;
  const uint64_t rows = a.count / a.row;
  int threads = static_cast<int>(round_up(row_vecs < 1024 ? row_vecs : 1024, 32));
  const uint64_t per_thread = ceil_div(row_vecs, threads);
  const int blocks = static_cast<int>(rows < kMaxEpilogueBlocks ? rows : kMaxEpilogueBlocks);
  if (per_thread <= 1) {
    all_reduce_rows_kernel<T, kNorm, 1><<<blocks, threads, 0, stream>>>(c, a);
  } else if (per_thread <= 2) {
    all_reduce_rows_kernel<T, kNorm, 2><<<blocks, threads, 0, stream>>>(c, a);
  } else if (per_thread <= 4) {
    all_reduce_rows_kernel<T, kNorm, 4><<<blocks, threads, 0, stream>>>(c, a);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

uint64_t all_reduce_1pa_ll_scratch_bytes(uint64_t bytes, int nranks) {
  const uint64_t half = nranks * slot_bytes(bytes);
  return half > kLLHalfCap ? 0 : 4 * round_up(half, 256);
}

namespace {

uint64_t piece_cap_1pa_ll(int nranks, const ScratchLayout& s) {
  // Each half holds n slots of packets, 16 bytes per 8 of data.
  return round_down(s.ll_half / (2 * static_cast<uint64_t>(nranks)), 16);
}

uint64_t piece_cap(int32_t, int nranks, uint64_t, uint64_t scratch_bytes, const StreamTuning&) {
  return piece_cap_1pa_ll(nranks, ScratchLayout::of(scratch_bytes));
}

cudaError_t launch(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream) {
  const int blocks = blocks_for(p.len, k1paLLBytesPerBlock, kLLMaxBlocks);
  return launch_reduction(a.dtype, a.op, [&](auto t, auto o) {
    all_reduce_1pa_ll_kernel<decltype(t), decltype(o)><<<blocks, k1paLLThreads, 0, stream>>>(c, p);
    return cudaSuccess;
  });
}

}  // namespace

JAX_MSCCLPP_LAUNCHER(kOnePhaseAllPairsLL) {
  static constexpr Launcher kLauncher{piece_cap, nullptr, launch};
  return call.collective == codes::kAllReduce ? &kLauncher : nullptr;
}

}  // namespace jax_mscclpp::collectives

namespace jax_mscclpp {

bool epilogue_supported(int nranks, uint64_t count, uint64_t row, int32_t dtype, uint64_t scratch_bytes) {
  const uint64_t esize = dtype_bytes(dtype);
  if (dtype != codes::kF32 && dtype != codes::kBF16 && dtype != codes::kF16) return false;
  if (nranks < 2 || row == 0 || count == 0 || count % row != 0) return false;
  if ((row * esize) % 16 != 0 || row * esize > collectives::kMaxEpilogueRowBytes) return false;
  const collectives::ScratchLayout s = collectives::ScratchLayout::of(scratch_bytes);
  return count * esize <= collectives::piece_cap_1pa_ll(nranks, s);
}

cudaError_t launch_all_reduce_epilogue(const CollectiveContext& ctx, Epilogue epilogue, const EpilogueCall& call,
                                       int32_t dtype, cudaStream_t stream) {
  if (!epilogue_supported(ctx.nranks, call.count, call.row, dtype, ctx.scratch_bytes)) return cudaErrorInvalidValue;
  if (ctx.epoch == nullptr || ctx.mem == nullptr) return cudaErrorNotReady;
  CollectiveContext c = ctx;
  c.call = call_words(codes::kAllReduce, codes::kSum, codes::kOnePhaseAllPairsLL, dtype, call.count,
                      epilogue_variant(int32_t(epilogue), call.row));
  const bool norm = epilogue == Epilogue::kResidualRMSNorm;
  auto go = [&](auto t) -> cudaError_t {
    using T = decltype(t);
    return norm ? collectives::launch_rows<T, true>(c, call, stream)
                : collectives::launch_rows<T, false>(c, call, stream);
  };
  switch (dtype) {
    case codes::kF32: return go(float{});
    case codes::kBF16: return go(__nv_bfloat16{});
    case codes::kF16: return go(__half{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace jax_mscclpp
