// The protocol of an algorithm chosen by size (selection.def, JAX_MSCCLPP_PROTOCOL_RULE): the algorithm that
// runs a block of `block_bytes` bytes, LL packets up to the row's bound and streaming HB above; any other algorithm
// is its own. The launchers of the size-chosen algorithms apply it; the selection matcher (runtime/select/rules.h,
// protocol_of) asks it for what Python's selection reports.
#pragma once

#include <cstdint>

#include "jax_mscclpp/codes.h"

namespace jax_mscclpp::collectives {

constexpr int32_t protocol_algorithm(int32_t algorithm, uint64_t block_bytes) {
#define JAX_MSCCLPP_PROTOCOL_RULE(size_chosen, ll_max_block_bytes, ll_algorithm, hb_algorithm) \
  if (algorithm == codes::size_chosen)                                                         \
    return block_bytes <= uint64_t(ll_max_block_bytes) ? int32_t(codes::ll_algorithm) : int32_t(codes::hb_algorithm);
#include "jax_mscclpp/selection.def"
  return algorithm;
}

}  // namespace jax_mscclpp::collectives
