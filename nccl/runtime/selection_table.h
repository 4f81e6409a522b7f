// The GPU rows of the selection table shared with the JAX path (jax_mscclpp/selection.def), as this library reads
// them, beneath the rules of the communicator's tuning file (tuning_file.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tuning_file.h"

namespace jax_mscclpp::nccl {

// The algorithm (codes.def) for a GPU call of `collective` with `nbytes` of input per rank over `world` ranks,
// over the `tuned` rules (consulted first, any world), then the built-in GPU rules: the first matching rule's;
// where that is the framework's own collective, -1 when `nccl_can_run`, else the first later matching rule of
// ours, else the collective's any-size algorithm.
int32_t select_algorithm(const std::vector<TunedRule>& tuned, int32_t collective, uint64_t nbytes, int world,
                         bool nccl_can_run);

// A digest of the built-in rules compiled into this library (selection.def's rows, agreement.h): ranks built from
// different tables would choose differently.
std::string selection_rules_digest();

}  // namespace jax_mscclpp::nccl
