// fold_blocks (fold.h): one grid-stride kernel per (element type, operation).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "collectives/fold.h"
#include "jax_mscclpp/atomics.cuh"
#include "jax_mscclpp/reduce.cuh"

namespace jax_mscclpp {
namespace {

// The accumulator of each element type and the conversions to and from it: the element type itself (integers wrap
// in their own width, as NCCL's reductions do), float for the 8-bit floats, and the collectives' f32 accumulation of
// the 16-bit floats (reduce.cuh).
template <class T>
struct FoldTraits : SelfAccumulating<T> {};
template <>
struct FoldTraits<__half> : ReduceTraits<__half> {};
template <>
struct FoldTraits<__nv_bfloat16> : ReduceTraits<__nv_bfloat16> {};
template <class T>
struct Fp8FoldTraits {
  using Acc = float;
  __device__ static float widen(T v) { return static_cast<float>(v); }
  __device__ static T narrow(float v) { return T(v); }
};
template <>
struct FoldTraits<__nv_fp8_e4m3> : Fp8FoldTraits<__nv_fp8_e4m3> {};
template <>
struct FoldTraits<__nv_fp8_e5m2> : Fp8FoldTraits<__nv_fp8_e5m2> {};

template <class A>
__device__ A wrapping_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class A>
__device__ A wrapping_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// An element's bits as the unsigned integer of its size, and back (register moves only).
template <class T>
using Bits = std::conditional_t<sizeof(T) == 1, uint8_t,
                                std::conditional_t<sizeof(T) == 2, uint16_t,
                                                   std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
template <class T>
__device__ T from_bits(Bits<T> bits) {
  T v;
  memcpy(&v, &bits, sizeof(T));
  return v;
}
template <class T>
__device__ Bits<T> to_bits(T v) {
  Bits<T> bits;
  memcpy(&bits, &v, sizeof(T));
  return bits;
}

// One element of an operand (aligned to its size: launch_fold_blocks checks).
template <class T>
__device__ T load(const char* p) {
  return from_bits<T>(*reinterpret_cast<const Bits<T>*>(p));
}
template <class T>
__device__ void store(char* p, T v) {
  *reinterpret_cast<Bits<T>*>(p) = to_bits(v);
}

// The factor of kPreMulSum as an element: from device memory (any alignment: assembled from its bytes), or the low
// bytes of the bits given at launch.
template <class T>
__device__ T scalar_of(const FoldScalar& scalar) {
  if (scalar.device == nullptr) return from_bits<T>(static_cast<Bits<T>>(scalar.bits));
  const unsigned char* p = static_cast<const unsigned char*>(scalar.device);
  Bits<T> bits = 0;
  for (int b = 0; b < static_cast<int>(sizeof(T)); ++b)
    bits |= static_cast<Bits<T>>(static_cast<Bits<T>>(p[b]) << (8 * b));
  return from_bits<T>(bits);
}

template <class T, FoldOp kOp>
__global__ void fold_kernel(const char* blocks, uint64_t stride, int n, char* out, uint64_t count, FoldScalar scalar,
                            int divisor, const uint64_t* failed) {
  using Tr = FoldTraits<T>;
  // A block that starts after the rank failed writes poison (fold.h); one load for the block.
  int set = 0;
  if (failed != nullptr && threadIdx.x == 0) set = load_relaxed_sys(failed) != 0;
  const bool poisoned = failed != nullptr && __syncthreads_or(set) != 0;
  using A = typename Tr::Acc;
  A factor{};
  if constexpr (kOp == FoldOp::kPreMulSum) {
    factor = Tr::widen(scalar_of<T>(scalar));
  } else if constexpr (kOp == FoldOp::kAvg && !std::is_integral_v<A>) {
    factor = static_cast<A>(1.0 / divisor);
  }
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count; i += step) {
    if (poisoned) {
      *reinterpret_cast<Bits<T>*>(out + i * sizeof(T)) = static_cast<Bits<T>>(~Bits<T>{0});
      continue;
    }
    const char* at = blocks + i * sizeof(T);
    A acc{};
    for (int q = 0; q < n; ++q) {
      A v = Tr::widen(load<T>(at + q * stride));
      if constexpr (kOp == FoldOp::kPreMulSum || (kOp == FoldOp::kAvg && !std::is_integral_v<A>)) v = wrapping_mul(v, factor);
      if (q == 0) {
        acc = v;
      } else if constexpr (kOp == FoldOp::kSum || kOp == FoldOp::kAvg || kOp == FoldOp::kPreMulSum) {
        acc = wrapping_add(acc, v);
      } else if constexpr (kOp == FoldOp::kProd) {
        acc = wrapping_mul(acc, v);
      } else if constexpr (kOp == FoldOp::kMax) {
        if constexpr (std::is_integral_v<A>) acc = acc > v ? acc : v;
        else acc = (acc != acc || acc > v) ? acc : v;
      } else {
        if constexpr (std::is_integral_v<A>) acc = acc < v ? acc : v;
        else acc = (acc != acc || acc < v) ? acc : v;
      }
    }
    if constexpr (kOp == FoldOp::kAvg && std::is_integral_v<A>) acc = static_cast<A>(acc / static_cast<A>(divisor));
    store<T>(out + i * sizeof(T), Tr::narrow(acc));
  }
}

template <class T>
cudaError_t launch_typed(const char* blocks, uint64_t stride, int n, char* out, uint64_t count, FoldOp op,
                         FoldScalar scalar, int divisor, const uint64_t* failed, cudaStream_t stream) {
  if ((reinterpret_cast<uintptr_t>(blocks) | reinterpret_cast<uintptr_t>(out) | stride) % sizeof(T) != 0)
    return cudaErrorInvalidValue;
  constexpr int kThreads = 256;
  uint64_t grid = (count + kThreads - 1) / kThreads;
  if (grid > 1024) grid = 1024;
  const dim3 g(static_cast<unsigned>(grid)), b(kThreads);
  const auto go = [&](auto kernel) {
    kernel<<<g, b, 0, stream>>>(blocks, stride, n, out, count, scalar, divisor, failed);
    return cudaGetLastError();
  };
  switch (op) {
    case FoldOp::kSum: return go(fold_kernel<T, FoldOp::kSum>);
    case FoldOp::kProd: return go(fold_kernel<T, FoldOp::kProd>);
    case FoldOp::kMax: return go(fold_kernel<T, FoldOp::kMax>);
    case FoldOp::kMin: return go(fold_kernel<T, FoldOp::kMin>);
    case FoldOp::kAvg: return go(fold_kernel<T, FoldOp::kAvg>);
    case FoldOp::kPreMulSum: return go(fold_kernel<T, FoldOp::kPreMulSum>);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int fold_element_bytes(FoldElement element) {
  switch (element) {
    case FoldElement::kS8: case FoldElement::kU8: case FoldElement::kF8E4M3: case FoldElement::kF8E5M2: return 1;
    case FoldElement::kF16: case FoldElement::kBF16: return 2;
    case FoldElement::kS32: case FoldElement::kU32: case FoldElement::kF32: return 4;
    case FoldElement::kS64: case FoldElement::kU64: case FoldElement::kF64: return 8;
  }
  return 0;
}

cudaError_t launch_fold_blocks(const char* blocks, uint64_t block_stride, int nblocks, char* out, uint64_t count,
                               FoldElement element, FoldOp op, FoldScalar scalar, int divisor,
                               const uint64_t* failed, cudaStream_t stream) {
  if (nblocks < 1 || (op == FoldOp::kAvg && divisor < 1)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const auto go = [&](auto t) {
    return launch_typed<decltype(t)>(blocks, block_stride, nblocks, out, count, op, scalar, divisor, failed, stream);
  };
  switch (element) {
    case FoldElement::kS8: return go(int8_t{});
    case FoldElement::kU8: return go(uint8_t{});
    case FoldElement::kS32: return go(int32_t{});
    case FoldElement::kU32: return go(uint32_t{});
    case FoldElement::kS64: return go(int64_t{});
    case FoldElement::kU64: return go(uint64_t{});
    case FoldElement::kF16: return go(__half{});
    case FoldElement::kF32: return go(float{});
    case FoldElement::kF64: return go(double{});
    case FoldElement::kBF16: return go(__nv_bfloat16{});
    case FoldElement::kF8E4M3: return go(__nv_fp8_e4m3{});
    case FoldElement::kF8E5M2: return go(__nv_fp8_e5m2{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace jax_mscclpp
