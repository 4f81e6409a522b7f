// The vocabulary shared by the Python API, the FFI handlers and every backend. The integer values travel as
// custom-call attributes: keep them in step with jax_mscclpp/_types.py.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace jax_mscclpp {

enum class Collective : int32_t { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2, kAllToAll = 3 };
enum class ReduceOp : int32_t { kSum = 0, kMax = 1, kMin = 2 };

// Algorithms. The host backend runs the shapes of 1PA and 2PA (all_reduce) and all-pairs (the others); the
// protocol (LL or HB) only matters on the GPU, so the host treats 2PA-LL and 2PA-HB alike.
enum class Algorithm : int32_t {
  kOnePhaseAllPairsLL = 0,  // "1pa_ll"
  kTwoPhaseAllPairsLL = 1,  // "2pa_ll"
  kTwoPhaseAllPairsHB = 2,  // "2pa_hb"
  kTwoPhaseRing = 3,        // "2pr"
  kTwoPhaseNvls = 4,        // "2pa_nvls"
  kAllPairs = 5,            // "allpairs": all_gather, reduce_scatter, all_to_all
  kPlan = 6,                // an execution plan registered with the communicator (attribute plan_id)
  kAllPairsLL = 7,          // "allpairs_ll": kAllPairs forced to the LL protocol (GPU; the host runs kAllPairs)
  kAllPairsHB = 8,          // "allpairs_hb": kAllPairs forced to the HB protocol (GPU; the host runs kAllPairs)
  kOnePhaseAllPairsHB = 9,  // "1pa_hb": one phase on the streaming HB protocol (the host runs it as 1PA)
};

enum class DType : int32_t { kF32, kBF16, kF16, kF64, kS8, kU8, kS16, kU16, kS32, kU32, kS64, kU64, kInvalid };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kS8: case DType::kU8: return 1;
    case DType::kBF16: case DType::kF16: case DType::kS16: case DType::kU16: return 2;
    case DType::kF32: case DType::kS32: case DType::kU32: return 4;
    case DType::kF64: case DType::kS64: case DType::kU64: return 8;
    default: return 0;
  }
}

inline const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
  }
  return "?";
}

// One call of a collective on one rank. Counts are elements. Layouts (contiguous, row-major):
//   all_reduce:     in[n]            -> out[n]
//   all_gather:     in[n]            -> out[world][n]          (block r from rank r)
//   reduce_scatter: in[world][n]     -> out[n]                 (block r reduced over ranks goes to rank r)
//   all_to_all:     in[world][n]     -> out[world][n]          (out block r = rank r's in block of mine)
// `block_count` is n.
struct CollectiveCall {
  Collective collective;
  ReduceOp op;
  Algorithm algorithm;
  DType dtype;
  const void* in;
  void* out;
  size_t block_count;
};

}  // namespace jax_mscclpp
