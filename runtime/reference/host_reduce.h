// Element-wise reduction of the host backend, for every dtype of the API. Sums of integers wrap (as XLA's do);
// max/min propagate NaN. A fold over several sources (fold_sources) takes bf16 and f16 to f32, folds there and
// rounds to nearest-even once at the end, as the GPU kernels do (jax_mscclpp/reduce.cuh); a pairwise step
// (reduce_bytes) rounds after the step.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collective_types.h"

namespace jax_mscclpp::host {

struct BF16 {
  uint16_t bits;
  static float to_float(BF16 v) {
    uint32_t u = uint32_t(v.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static BF16 from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return BF16{uint16_t((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return BF16{uint16_t(u >> 16)};
  }
};

struct F16 {
  _Float16 value;
  static float to_float(F16 v) { return float(v.value); }
  static F16 from_float(float f) { return F16{_Float16(f)}; }
};

template <class T>
struct Arith {
  static T combine(T a, T b, ReduceOp op) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      switch (op) {
        case ReduceOp::kSum: return T(U(a) + U(b));
        case ReduceOp::kMax: return a > b ? a : b;
        case ReduceOp::kMin: return a < b ? a : b;
      }
      return a;
    } else {
      switch (op) {
        case ReduceOp::kSum: return a + b;
        case ReduceOp::kMax: return (std::isnan(a) || a > b) ? a : b;
        case ReduceOp::kMin: return (std::isnan(a) || a < b) ? a : b;
      }
      return a;
    }
  }
};

template <class T>
  requires(std::is_same_v<T, BF16> || std::is_same_v<T, F16>)
struct Arith<T> {
  static T combine(T a, T b, ReduceOp op) {
    return T::from_float(Arith<float>::combine(T::to_float(a), T::to_float(b), op));
  }
};

// acc[i] = acc[i] (op) src[i] for i < n.
template <class T>
void reduce_into(T* acc, const T* src, size_t n, ReduceOp op) {
  for (size_t i = 0; i < n; ++i) acc[i] = Arith<T>::combine(acc[i], src[i], op);
}

// Calls fn.template operator()<T>() with the storage type of `dtype`: the one dispatch switch over dtypes.
template <class Fn>
void dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
#define JAX_MSCCLPP_DTYPE(enumerator, code, name, bytes, host_type, device_type, nccl_type, xla_type) \
  case DType::enumerator:                                                                   \
    fn.template operator()<host_type>();                                                    \
    break;
#include "jax_mscclpp/codes.def"
    case DType::kInvalid: break;
  }
}

// acc[i] = acc[i] (op) src[i] over n elements of `dtype`.
inline void reduce_bytes(DType dtype, void* acc, const void* src, size_t n, ReduceOp op) {
  dispatch_dtype(dtype, [&]<class T>() { reduce_into(static_cast<T*>(acc), static_cast<const T*>(src), n, op); });
}

// dst[i] = source(0)[i] (op) source(1)[i] (op) ... (op) source(count - 1)[i] over n elements of `dtype`, a left
// fold in source order. bf16 and f16 accumulate in f32 and are rounded once. `source(k)` returns a pointer to n
// elements; dst may be one of the sources (each element is read before it is written).
template <class Source>
void fold_sources(DType dtype, ReduceOp op, void* dst, size_t n, int count, Source source) {
  if (n == 0 || count < 1) return;
  dispatch_dtype(dtype, [&]<class T>() {
    T* out = static_cast<T*>(dst);
    if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>) {
      constexpr size_t kTile = 512;
      float acc[kTile];
      for (size_t lo = 0; lo < n; lo += kTile) {
        const size_t len = n - lo < kTile ? n - lo : kTile;
        const T* first = static_cast<const T*>(static_cast<const void*>(source(0))) + lo;
        for (size_t i = 0; i < len; ++i) acc[i] = T::to_float(first[i]);
        for (int k = 1; k < count; ++k) {
          const T* next = static_cast<const T*>(static_cast<const void*>(source(k))) + lo;
          for (size_t i = 0; i < len; ++i) acc[i] = Arith<float>::combine(acc[i], T::to_float(next[i]), op);
        }
        for (size_t i = 0; i < len; ++i) out[lo + i] = T::from_float(acc[i]);
      }
    } else {
      auto at = [&](int k) { return static_cast<const T*>(static_cast<const void*>(source(k))); };
      if (at(0) != out) std::memmove(out, at(0), n * sizeof(T));
      for (int k = 1; k < count; ++k) reduce_into(out, at(k), n, op);
    }
  });
}

}  // namespace jax_mscclpp::host
