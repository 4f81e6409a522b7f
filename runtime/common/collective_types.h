// The vocabulary shared by the Python API, the FFI handlers and every backend: the enums of
// kernels/include/jax_mscclpp/codes.def (the one table of every code), names, and one call's description.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "jax_mscclpp/block_layout.h"
#include "jax_mscclpp/codes.h"

namespace jax_mscclpp {

enum class Collective : int32_t {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
};

enum class ReduceOp : int32_t {
#define JAX_MSCCLPP_REDUCE_OP(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
};

// Algorithms. The host backend runs each as codes.def's `host` column says; the protocol (LL or HB) only matters
// on the GPU.
enum class Algorithm : int32_t {
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
};

enum class DType : int32_t {
#define JAX_MSCCLPP_DTYPE(enumerator, code, ...) enumerator = code,
#include "jax_mscclpp/codes.def"
  kInvalid = 255,  // no dtype (fits the 8 bits a call signature gives it, runtime/common/call_signature.h)
};

// How the host reference backend runs an algorithm (codes.def, column `host`).
enum HostRun : int32_t { kHostNone, kHostOnePhase, kHostTwoPhase, kHostAllPairs, kHostPointToPoint };

inline HostRun host_run(Algorithm a) {
  switch (a) {
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name, collectives, host, needs) \
  case Algorithm::enumerator:                                             \
    return host;
#include "jax_mscclpp/codes.def"
  }
  return kHostNone;
}

// Whether a call of `c` may name algorithm `a` (codes.def, column `collectives`).
inline bool algorithm_serves(Algorithm a, Collective c) {
  int mask = 0;
  switch (a) {
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name, collectives, host, needs) \
  case Algorithm::enumerator:                                             \
    mask = collectives;                                                   \
    break;
#include "jax_mscclpp/codes.def"
  }
  return (mask >> static_cast<int>(c)) & 1;
}

inline size_t dtype_size(DType t) { return dtype_bytes(static_cast<int32_t>(t)); }

inline const char* collective_name(Collective c) {
  switch (c) {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, name, ...) \
  case Collective::enumerator:                             \
    return name;
#include "jax_mscclpp/codes.def"
  }
  return "?";
}

inline const char* op_name(ReduceOp op) {
  switch (op) {
#define JAX_MSCCLPP_REDUCE_OP(enumerator, code, name) \
  case ReduceOp::enumerator:                         \
    return name;
#include "jax_mscclpp/codes.def"
  }
  return "?";
}

inline const char* dtype_name(DType t) {
  switch (t) {
#define JAX_MSCCLPP_DTYPE(enumerator, code, name, ...) \
  case DType::enumerator:                             \
    return name;
#include "jax_mscclpp/codes.def"
    case DType::kInvalid: break;
  }
  return "?";
}

inline const char* algorithm_name(Algorithm a) {
  switch (a) {
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name, ...) \
  case Algorithm::enumerator:                             \
    return name;
#include "jax_mscclpp/codes.def"
  }
  return "?";
}

// One call of a collective on one rank. Counts are elements; the buffers are contiguous blocks of `block_count`
// elements as the collective's block layout says (jax_mscclpp/block_layout.h). kPermute only: the rank this one
// sends its block to and the rank it receives from (-1: none; itself: a local copy).
struct CollectiveCall {
  Collective collective;
  ReduceOp op;
  Algorithm algorithm;
  DType dtype;
  const void* in;
  void* out;
  size_t block_count;
  int32_t send_to = -1;
  int32_t recv_from = -1;
};

}  // namespace jax_mscclpp
