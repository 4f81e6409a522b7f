// The codes of codes.def as plain int32_t enumerators, for code that dispatches on attribute values (the kernels'
// launchers and the executor), and the element size of each dtype. Host and device code alike.
#pragma once

#include <cstdint>

namespace jax_mscclpp {
namespace codes {

enum CollectiveCode : int32_t {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
};

enum ReduceCode : int32_t {
#define JAX_MSCCLPP_REDUCE_OP(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
};

enum DTypeCode : int32_t {
#define JAX_MSCCLPP_DTYPE(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
};

enum AlgorithmCode : int32_t {
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
};

enum PlacementCode : int32_t {
#define JAX_MSCCLPP_PLACEMENT(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
};

// A protocol row of selection.def for calls of every collective (its collective column).
constexpr int32_t kAnyCollective = -1;

// The placement of a communicator whose ranks share a GPU (share_a_gpu) or not.
constexpr PlacementCode placement_of(bool shares_gpu) { return shares_gpu ? kSharedGpu : kOwnGpu; }

}  // namespace codes

// __host__ __device__ under nvcc: host-device code asks it too (call_inbox.cuh, call_words).
#if defined(__CUDACC__)
#define JAX_MSCCLPP_CODES_HOST_DEVICE __host__ __device__
#else
#define JAX_MSCCLPP_CODES_HOST_DEVICE
#endif

// Whether `collective` combines ranks' elements with the call's reduce op (codes.def, column `reduces`); false
// for a collective that moves elements unchanged and for an unknown code.
JAX_MSCCLPP_CODES_HOST_DEVICE constexpr bool collective_reduces(int32_t collective) {
  switch (collective) {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, name, input_blocks, output_blocks, reduces) \
  case code:                                                                                 \
    return reduces != 0;
#include "jax_mscclpp/codes.def"
    default: return false;
  }
}

#undef JAX_MSCCLPP_CODES_HOST_DEVICE

// Element size of a dtype code, 0 for an unknown code.
constexpr uint64_t dtype_bytes(int32_t dtype) {
  switch (dtype) {
#define JAX_MSCCLPP_DTYPE(enumerator, code, name, bytes, ...) \
  case code:                                                   \
    return bytes;
#include "jax_mscclpp/codes.def"
    default: return 0;
  }
}

}  // namespace jax_mscclpp
