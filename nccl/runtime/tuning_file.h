// A tuning file (jax_mscclpp/tuning_file.py: format "jax_mscclpp.tuning/1", written by python -m jax_mscclpp.tune)
// as this library reads it: its GPU rules, in file order, which the selection consults before the built-in table
// (selection_table.cc), as the JAX path does. The file is found as the JAX path finds it: the one
// JAX_MSCCLPP_TUNING_FILE names, "off" (also "none", "0", "false") for none, else (unset or empty) the default file
// of the topology, <cache>/tuning/<topology>.json, cache being JAX_MSCCLPP_CACHE_DIR, else
// $XDG_CACHE_HOME/jax_mscclpp, else $HOME/.cache/jax_mscclpp. The library names the topology its communicator
// spans (topology_name): for a communicator over every device of the job, the JAX path's name.
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

// "gpu-<device kind>-<n>dev" ("-<p>proc" after it with several processes): the kind lower-cased, each run of
// characters other than letters and digits one dash (jax_mscclpp/tuning_file.py, topology_name).
std::string topology_name(const std::string& device_kind, int devices, int processes);

// The file the selection reads for `topology`; "" for none (JAX_MSCCLPP_TUNING_FILE is off). A default file need
// not exist.
std::string tuning_file_path(const std::string& topology);

// The rules in force for `topology`, read once per path and process: none for no file or a default file that does
// not exist; a named file that cannot be read, or a file that cannot be parsed, gives none and a line on stderr,
// as do skipped rules.
const std::vector<TunedRule>& tuned_rules(const std::string& topology);

}  // namespace jax_mscclpp::nccl
