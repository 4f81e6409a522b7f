// What every platform's FFI handlers decode the same way: element types, block geometry, target names.
#pragma once

#include <cstddef>
#include <string>

#include "collective_types.h"
#include "xla/ffi/api/ffi.h"

namespace jax_mscclpp {

// The DType of an XLA element type (kInvalid for one the collectives do not run on): codes.def's xla_type column.
inline DType to_dtype(xla::ffi::DataType t) {
  switch (t) {
#define JAX_MSCCLPP_DTYPE(enumerator, code, name, bytes, host_type, device_type, nccl_type, xla_type) \
  case xla::ffi::DataType::xla_type:                                                                \
    return DType::enumerator;
#include "jax_mscclpp/codes.def"
    default: return DType::kInvalid;
  }
}

// The implementation of collective kCollective's handler: `kPermute` for the permutation, `kOther` (the
// platform's handler of the collective) for every other.
template <Collective kCollective, auto kPermute, auto kOther>
constexpr auto implementation_of() {
  if constexpr (kCollective == Collective::kPermute)
    return kPermute;
  else
    return kOther;
}

// The binding of collective kCollective's handler: what `common()` binds (what every collective's handler takes),
// and for the permutation its destination table. (A binding is only ever built in one expression: it cannot be
// moved, so `common` makes it.)
template <Collective kCollective, class Common>
auto binding_of(Common common) {
  if constexpr (kCollective == Collective::kPermute)
    return common().template Attr<xla::ffi::Span<const int32_t>>("destinations");
  else
    return common();
}

// Elements of one block from the input and output element counts; false on a mismatch (the layout's one owner:
// jax_mscclpp/block_layout.h).
inline bool block_count_of(Collective c, size_t in_elems, size_t out_elems, size_t world, size_t* block) {
  return block_count_of(static_cast<int32_t>(c), in_elems, out_elems, world, block);
}

// The peers of rank `rank` under the permutation's destination table (`destinations[r]`: the rank r sends to, -1
// for none; jax_mscclpp/permute.py): where it sends and whence it receives (-1: none). False when the table does
// not have `world` entries, names a rank outside [0, world) or names one twice.
inline bool permute_peers(xla::ffi::Span<const int32_t> destinations, int world, int rank, int32_t* send_to,
                          int32_t* recv_from) {
  if (destinations.size() != size_t(world)) return false;
  *send_to = -1;
  *recv_from = -1;
  for (int r = 0; r < world; ++r) {
    const int32_t d = destinations[r];
    if (d < -1 || d >= world) return false;
    if (d < 0) continue;
    for (int q = 0; q < r; ++q)
      if (destinations[q] == d) return false;
    if (r == rank) *send_to = d;
    if (d == rank) *recv_from = r;
  }
  return true;
}

// The FFI target of a collective, the same on every platform (jax_mscclpp/_types.py: Collective.target).
inline std::string target_name(Collective c) { return std::string("jax_mscclpp_") + collective_name(c); }

// The fused all_reduce + epilogue targets (GPU only; jax_mscclpp/fused.py lowers them, and composes the same
// result from the plain collective elsewhere).
inline constexpr const char* kAllReduceResidualTarget = "jax_mscclpp_all_reduce_residual";
inline constexpr const char* kAllReduceRMSNormTarget = "jax_mscclpp_all_reduce_rmsnorm";

// The ragged all-to-all's target (GPU only; jax_mscclpp/ragged.py lowers it, and composes the same result of
// all_to_all elsewhere).
inline constexpr const char* kRaggedAllToAllTarget = "jax_mscclpp_ragged_all_to_all";

// GPU targets are registered twice: under the name above, command-buffer compatible (XLA may record the call into
// its CUDA graphs), and under the name plus this suffix, without that trait (XLA runs the call as its own thunk and
// records only the work between such calls). jax_mscclpp/primitives.py: gpu_target picks one per lowering;
// docs/architecture.md, "Command buffers", says why both exist.
inline constexpr const char* kOutsideGraphsSuffix = "_outside_graphs";

// A collective started on a side stream: the collective's target plus this suffix (all_reduce only), and the done
// that joins any started call (GPU only, never in command buffers; jax_mscclpp/overlap.py lowers them,
// docs/architecture.md, "Overlap").
inline constexpr const char* kStartSuffix = "_start";
inline constexpr const char* kDoneTarget = "jax_mscclpp_done";

}  // namespace jax_mscclpp
