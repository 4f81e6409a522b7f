// What this library runs of the selection (runtime/select: the one rule matcher and tuning-file reader, shared
// with the JAX path): the GPU rules of the tuning file that it runs, held once per path and process, and the
// algorithm of a GPU call over them and the built-in table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "select/rules.h"

namespace jax_mscclpp::nccl {

// The rules of a tuning file this library runs, in file order: its GPU rules that say "lax" (NVIDIA's NCCL here)
// or name an algorithm of codes.def that serves the rule's collective and needs nothing beyond memory channels
// (the library's communicators have no port or switch channels; the JAX path's compositions are not run here).
// `skipped` gets "collective -> algorithm" of the other GPU rules.
std::vector<select::Rule> library_rules(const std::vector<select::Rule>& rules, std::vector<std::string>* skipped);

// The algorithm (codes.def) of a GPU call of `collective` with `nbytes` of input per rank over `world` ranks,
// under the `tuned` rules (select::choose); -1 for NVIDIA's NCCL. `nccl_can_run`: it holds a communicator for
// these ranks that it may run the call on; `shares_gpu`: ranks of the communicator share a GPU.
int32_t select_algorithm(const std::vector<select::Rule>& tuned, int32_t collective, uint64_t nbytes, int world,
                         bool nccl_can_run, bool shares_gpu);

// The rules in force for `topology` (its file: select::tuning_file_path), read once per path and process: none for
// no file or a default file that does not exist; a named file that cannot be read, or a file that cannot be parsed,
// gives none and a line on stderr, as do skipped rules. The reference stays valid for the process's life.
const std::vector<select::Rule>& tuned_rules(const std::string& topology);

}  // namespace jax_mscclpp::nccl
