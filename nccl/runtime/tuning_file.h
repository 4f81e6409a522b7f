// A tuning file (jax_mscclpp/tuning_file.py: format "jax_mscclpp.tuning/1", written by python -m jax_mscclpp.tune)
// as this library reads it: its GPU rules, in file order, which the selection consults before the built-in table
// (selection_table.cc), as the JAX path does. The library reads the file JAX_MSCCLPP_TUNING_FILE names; the
// per-topology default file is found by the JAX path alone (its name comes from JAX's devices).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jax_mscclpp::nccl {

struct TunedRule {
  int32_t collective;  // codes.def
  int64_t max_bytes;   // per-rank input bytes, inclusive; -1: no bound
  int32_t algorithm;   // codes.def; -1: the framework's own collective (NVIDIA's NCCL here)
};

struct TuningFile {
  std::vector<TunedRule> rules;      // the GPU rules this library runs, in file order
  std::vector<std::string> skipped;  // "collective -> algorithm" of GPU rules it does not run (as the JAX path)
};

// Parses a tuning file's text; false with `error` set for text that is not JSON or not of that format.
bool parse_tuning_file(const std::string& text, TuningFile* out, std::string* error);

// The rules of the file JAX_MSCCLPP_TUNING_FILE names, read once per process: none when it is unset or "off"
// (also "none", "0", "false"); a file that cannot be read or parsed gives none and a line on stderr, as do skipped
// rules.
const std::vector<TunedRule>& tuned_rules();

}  // namespace jax_mscclpp::nccl
