// Element-wise reduction of the host backend, for every dtype of the API. Sums of integers wrap (as XLA's do);
// bf16 and f16 are reduced in f32 and rounded to nearest-even after each step; max/min propagate NaN.
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
    case DType::kF32: fn.template operator()<float>(); break;
    case DType::kF64: fn.template operator()<double>(); break;
    case DType::kBF16: fn.template operator()<BF16>(); break;
    case DType::kF16: fn.template operator()<F16>(); break;
    case DType::kS8: fn.template operator()<int8_t>(); break;
    case DType::kU8: fn.template operator()<uint8_t>(); break;
    case DType::kS16: fn.template operator()<int16_t>(); break;
    case DType::kU16: fn.template operator()<uint16_t>(); break;
    case DType::kS32: fn.template operator()<int32_t>(); break;
    case DType::kU32: fn.template operator()<uint32_t>(); break;
    case DType::kS64: fn.template operator()<int64_t>(); break;
    case DType::kU64: fn.template operator()<uint64_t>(); break;
    case DType::kInvalid: break;
  }
}

// acc[i] = acc[i] (op) src[i] over n elements of `dtype`.
inline void reduce_bytes(DType dtype, void* acc, const void* src, size_t n, ReduceOp op) {
  dispatch_dtype(dtype, [&]<class T>() { reduce_into(static_cast<T*>(acc), static_cast<const T*>(src), n, op); });
}

}  // namespace jax_mscclpp::host
