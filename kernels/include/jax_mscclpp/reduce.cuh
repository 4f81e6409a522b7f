// Element-wise reduction helpers: sum / max / min over 16-byte vectors, for every dtype of the API.
//
// Arithmetic: f16 and bf16 are widened to f32, reduced, and rounded to nearest-even once at the end;
// integer sums wrap (two's complement, as XLA's do), computed in a wider or unsigned type so no signed
// overflow occurs; max/min of floats propagate NaN. Kernels dispatch on the dtype and op codes of codes.def, the
// attributes the FFI handler decodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "atomics.cuh"
#include "codes.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace jax_mscclpp {

// Reduction operations as types, so kernels specialize on them at compile time.
struct SumOp {
  static constexpr int32_t kCode = codes::kSum;
};
struct MaxOp {
  static constexpr int32_t kCode = codes::kMax;
};
struct MinOp {
  static constexpr int32_t kCode = codes::kMin;
};

#if defined(__CUDACC__)

// An element type that accumulates in itself.
template <class T>
struct SelfAccumulating {
  using Acc = T;
  JAX_MSCCLPP_DEVICE_INLINE static Acc widen(T v) { return v; }
  JAX_MSCCLPP_DEVICE_INLINE static T narrow(Acc v) { return v; }
};

// Accumulator type and conversions for each element type.
template <class T>
struct ReduceTraits : SelfAccumulating<T> {};
template <>
struct ReduceTraits<__half> {
  using Acc = float;
  JAX_MSCCLPP_DEVICE_INLINE static float widen(__half v) { return __half2float(v); }
  JAX_MSCCLPP_DEVICE_INLINE static __half narrow(float v) { return __float2half_rn(v); }
};
template <>
struct ReduceTraits<__nv_bfloat16> {
  using Acc = float;
  JAX_MSCCLPP_DEVICE_INLINE static float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
  JAX_MSCCLPP_DEVICE_INLINE static __nv_bfloat16 narrow(float v) { return __float2bfloat16_rn(v); }
};
// Narrow integers are accumulated in 32 bits; truncation at the end gives the wrapped sum.
template <>
struct ReduceTraits<int8_t> {
  using Acc = int32_t;
  JAX_MSCCLPP_DEVICE_INLINE static int32_t widen(int8_t v) { return v; }
  JAX_MSCCLPP_DEVICE_INLINE static int8_t narrow(int32_t v) { return static_cast<int8_t>(static_cast<uint32_t>(v)); }
};
template <>
struct ReduceTraits<uint8_t> {
  using Acc = uint32_t;
  JAX_MSCCLPP_DEVICE_INLINE static uint32_t widen(uint8_t v) { return v; }
  JAX_MSCCLPP_DEVICE_INLINE static uint8_t narrow(uint32_t v) { return static_cast<uint8_t>(v); }
};
template <>
struct ReduceTraits<int16_t> {
  using Acc = int32_t;
  JAX_MSCCLPP_DEVICE_INLINE static int32_t widen(int16_t v) { return v; }
  JAX_MSCCLPP_DEVICE_INLINE static int16_t narrow(int32_t v) {
    return static_cast<int16_t>(static_cast<uint32_t>(v));
  }
};
template <>
struct ReduceTraits<uint16_t> {
  using Acc = uint32_t;
  JAX_MSCCLPP_DEVICE_INLINE static uint32_t widen(uint16_t v) { return v; }
  JAX_MSCCLPP_DEVICE_INLINE static uint16_t narrow(uint32_t v) { return static_cast<uint16_t>(v); }
};

// a (op) b on accumulators.
template <class Op, class A>
JAX_MSCCLPP_DEVICE_INLINE A combine(A a, A b) {
  if constexpr (std::is_same_v<Op, SumOp>) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  } else if constexpr (std::is_same_v<Op, MaxOp>) {
    if constexpr (std::is_integral_v<A>) {
      return a > b ? a : b;
    } else {
      return (a != a || a > b) ? a : b;  // NaN in either operand wins
    }
  } else {
    static_assert(std::is_same_v<Op, MinOp>, "unknown reduction");
    if constexpr (std::is_integral_v<A>) {
      return a < b ? a : b;
    } else {
      return (a != a || a < b) ? a : b;
    }
  }
}

// A 16-byte vector of T being reduced, held as accumulators in registers.
template <class T, class Op>
struct VecAccumulator {
  using Traits = ReduceTraits<T>;
  using Acc = typename Traits::Acc;
  static constexpr int kLanes = 16 / sizeof(T);
  Acc lanes[kLanes];

  JAX_MSCCLPP_DEVICE_INLINE void init(const uint4& raw) {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kLanes; ++i) lanes[i] = Traits::widen(e[i]);
  }
  JAX_MSCCLPP_DEVICE_INLINE void add(const uint4& raw) {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kLanes; ++i) lanes[i] = combine<Op>(lanes[i], Traits::widen(e[i]));
  }
  JAX_MSCCLPP_DEVICE_INLINE uint4 result() const {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kLanes; ++i) e[i] = Traits::narrow(lanes[i]);
    return raw;
  }
};

template <class T, class Op>
JAX_MSCCLPP_DEVICE_INLINE T reduce_scalar(T a, T b) {
  using Tr = ReduceTraits<T>;
  return Tr::narrow(combine<Op>(Tr::widen(a), Tr::widen(b)));
}

// Default number of sources reduced per pass (their loads are issued together).
constexpr int kMaxReduceSources = 8;

namespace detail {

// One pass over at most kMax sources.
template <class T, class Op, int kMax>
JAX_MSCCLPP_DEVICE_INLINE void reduce_pass(T* dst, const T* const* srcs, int nsrc, size_t count, bool vectorized,
                                           uint32_t tid, uint32_t nthreads) {
  constexpr size_t L = 16 / sizeof(T);
  size_t done = 0;
  if (vectorized) {
    const size_t nvec = count / L;
    const uint4* src[kMax];  // constant indices only: stays in registers
#pragma unroll
    for (int s = 0; s < kMax; ++s) src[s] = reinterpret_cast<const uint4*>(srcs[s < nsrc ? s : 0]);
    uint4* out = reinterpret_cast<uint4*>(dst);
    for (size_t i = tid; i < nvec; i += nthreads) {
      uint4 v[kMax];
#pragma unroll
      for (int s = 0; s < kMax; ++s) {
        if (s < nsrc) v[s] = src[s][i];
      }
      VecAccumulator<T, Op> acc;
      acc.init(v[0]);
#pragma unroll
      for (int s = 1; s < kMax; ++s) {
        if (s < nsrc) acc.add(v[s]);
      }
      out[i] = acc.result();
    }
    done = nvec * L;
  }
  for (size_t i = done + tid; i < count; i += nthreads) {
    T r = srcs[0][i];
    for (int s = 1; s < nsrc; ++s) r = reduce_scalar<T, Op>(r, srcs[s][i]);
    dst[i] = r;
  }
}

}  // namespace detail

// dst[i] = srcs[0][i] (op) ... (op) srcs[nsrc-1][i] for i < count, threads [tid, nthreads). nsrc >= 1; dst may
// alias a source only element-for-element (dst == srcs[k]). 16-byte vectors when every pointer is 16-byte
// aligned, scalars otherwise. Each pass reduces up to kMaxSources sources with their loads issued together;
// more sources take several passes through dst (the same thread owns the same elements in every pass, so no
// barrier is needed between passes). A smaller kMaxSources (the kernel knows its rank count) needs fewer
// registers, so more threads fit on a multiprocessor.
template <class T, class Op, int kMaxSources = kMaxReduceSources>
JAX_MSCCLPP_DEVICE_INLINE void reduce_elements(T* dst, const T* const* srcs, int nsrc, size_t count, uint32_t tid,
                                               uint32_t nthreads) {
  static_assert(kMaxSources >= 2, "a pass reduces at least two sources");
  uintptr_t misalign = reinterpret_cast<uintptr_t>(dst);
  for (int s = 0; s < nsrc; ++s) misalign |= reinterpret_cast<uintptr_t>(srcs[s]);
  const bool vectorized = (misalign & 15) == 0;
  const int first = nsrc < kMaxSources ? nsrc : kMaxSources;
  detail::reduce_pass<T, Op, kMaxSources>(dst, srcs, first, count, vectorized, tid, nthreads);
  const T* chunk[kMaxSources];
  for (int s = first; s < nsrc; s += kMaxSources - 1) {
    chunk[0] = dst;
    int k = 1;
    for (; k < kMaxSources && s + k - 1 < nsrc; ++k) chunk[k] = srcs[s + k - 1];
    detail::reduce_pass<T, Op, kMaxSources>(dst, chunk, k, count, vectorized, tid, nthreads);
  }
}

// Calls f(T{}, Op{}) with the element type and reduction named by the integer codes; returns false for an
// unknown code. The one dispatch switch through which kernels specialize on dtype and op.
template <class F>
inline bool dispatch_dtype_op(int32_t dtype, int32_t op, F&& f) {
  auto with_op = [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case codes::kSum: f(T{}, SumOp{}); return true;
      case codes::kMax: f(T{}, MaxOp{}); return true;
      case codes::kMin: f(T{}, MinOp{}); return true;
      default: return false;
    }
  };
  switch (dtype) {
#define JAX_MSCCLPP_DTYPE(enumerator, code, name, bytes, host_type, device_type, nccl_type, xla_type) \
  case codes::enumerator:                                                                   \
    return with_op(device_type{});
#include "jax_mscclpp/codes.def"
    default: return false;
  }
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
