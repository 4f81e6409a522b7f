// The protocol of an algorithm chosen by size (selection.def, JAX_MSCCLPP_PROTOCOL_RULE): the algorithm that runs a
// call's blocks, LL packets up to the first matching row's bound and streaming HB above; any other algorithm is its
// own. The launchers of the size-chosen algorithms apply it; the selection matcher (runtime/select/rules.h,
// protocol_of) asks it for what Python's selection reports. Beside it, the in-place rows (JAX_MSCCLPP_IN_PLACE_RULE):
// from which bytes a streaming call between ranks of one process runs in place (in_place.cu, direct_algorithm).
#pragma once

#include <cstdint>

#include "jax_mscclpp/codes.h"

namespace jax_mscclpp::collectives {

// What the protocol of a call depends on.
struct ProtocolCall {
  int32_t collective;    // codes.def
  uint64_t block_bytes;  // bytes of one block (the collective's block layout)
  int32_t nranks;
  int32_t placement;     // codes.def: kOwnGpu or kSharedGpu
};

// One protocol row of selection.def.
struct ProtocolRow {
  int32_t algorithm;   // the algorithm chosen by size
  int32_t collective;  // codes::kAnyCollective: every one
  int32_t placement;   // codes::kAnyPlacement: both
  int32_t world;       // 0: any
  uint64_t ll_max_block_bytes;
  int32_t ll, hb;

  constexpr bool matches(int32_t size_chosen, const ProtocolCall& call) const {
    return algorithm == size_chosen && (collective == codes::kAnyCollective || collective == call.collective) &&
           (placement == codes::kAnyPlacement || placement == call.placement) &&
           (world == 0 || world == call.nranks);
  }
};

inline constexpr ProtocolRow kProtocolRows[] = {
#define JAX_MSCCLPP_PROTOCOL_RULE(algorithm, collective, placement, world, ll_max_block_bytes, ll_algorithm, \
                                  hb_algorithm)                                                              \
  {codes::algorithm, codes::collective, codes::placement, world, uint64_t(ll_max_block_bytes),                \
   codes::ll_algorithm, codes::hb_algorithm},
#include "jax_mscclpp/selection.def"
};

constexpr int32_t protocol_algorithm(int32_t algorithm, const ProtocolCall& call) {
  for (const ProtocolRow& row : kProtocolRows)
    if (row.matches(algorithm, call)) return call.block_bytes <= row.ll_max_block_bytes ? row.ll : row.hb;
  return algorithm;
}

// One in-place row of selection.def.
struct InPlaceRow {
  int32_t world;  // 0: any
  uint64_t min_rank_bytes;
};

inline constexpr InPlaceRow kInPlaceRows[] = {
#define JAX_MSCCLPP_IN_PLACE_RULE(world, min_rank_bytes) {world, uint64_t(min_rank_bytes)},
#include "jax_mscclpp/selection.def"
};

// The fewest bytes a rank's buffer (the larger of input and output) holds for a streaming call on `nranks` ranks of
// one process to run in place: the first in-place row whose world matches (the last matches every world).
constexpr uint64_t in_place_min_rank_bytes(int32_t nranks) {
  for (const InPlaceRow& row : kInPlaceRows)
    if (row.world == 0 || row.world == nranks) return row.min_rank_bytes;
  return 0;
}

}  // namespace jax_mscclpp::collectives
