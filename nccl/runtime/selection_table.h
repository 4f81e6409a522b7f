// The GPU rows of the selection table shared with the JAX path (jax_mscclpp/selection.def), as this library reads
// them. The JAX path's tuning files are not read here.
#pragma once

#include <cstdint>

namespace jax_mscclpp::nccl {

// The algorithm (codes.def) for a GPU call of `collective` with `nbytes` of input per rank over `world` ranks:
// the first matching rule's; where that is the framework's own collective, -1 when `nccl_can_run`, else the first
// later matching rule of ours, else the collective's any-size algorithm.
int32_t selected_algorithm(int32_t collective, uint64_t nbytes, int world, bool nccl_can_run);

}  // namespace jax_mscclpp::nccl
