// The one rule matcher of algorithm selection, for both frontends: the JAX path (jax_mscclpp/selection.py, through
// the native module's `select` submodule) and the NCCL-API library (nccl/runtime/selection.h). It holds the
// built-in table (kernels/include/jax_mscclpp/selection.def) and matches a call against a tuning file's rules
// (tuning_file.h) and then that table. No CUDA, XLA, NCCL or Python here.
//
// A rule names its algorithm as the frontends do: a codes.def name, "lax" (the framework's own collective: lax's on
// the JAX path, NVIDIA's NCCL in the library) or, in a tuning file, a name of a frontend's own (the JAX path's
// compositions, e.g. "2ph"), which has no codes.def code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/protocol.h"

namespace jax_mscclpp::select {

constexpr int32_t kLax = -1;        // the code of "lax"
constexpr int32_t kNotNative = -2;  // the code of a name codes.def does not have

struct Rule {
  int32_t collective = 0;  // codes.def
  std::string platform;    // "cpu" or "gpu"; a tuning file may name another, which no call of ours has
  int64_t max_bytes = -1;  // per-rank input bytes, inclusive; -1: no bound
  std::string algorithm;   // a codes.def name, "lax", or a frontend's own name
  int32_t code = kLax;     // `algorithm`'s code: codes.def's, kLax, or kNotNative
  int world = 0;           // the world size the rule was measured at; 0: any

  // Whether the rule covers a call of `collective` on `platform` with `nbytes` per rank over `world` ranks (0: a
  // world not known, which every rule's covers).
  bool matches(int32_t collective, std::string_view platform, uint64_t nbytes, int world) const;
};

// A rule with `code` filled in from `algorithm`.
Rule make_rule(int32_t collective, std::string platform, int64_t max_bytes, std::string algorithm, int world);

// codes.def: a collective's code by name (-1 for none), its name (nullptr for none); an algorithm's code by name
// (kLax for "lax", kNotNative for a name codes.def lacks), its name ("lax" for kLax, nullptr for none).
int32_t collective_code(std::string_view name);
const char* collective_name(int32_t collective);
int32_t algorithm_code(std::string_view name);
const char* algorithm_name(int32_t algorithm);
// Whether codes.def's row of `algorithm` lets a call of `collective` choose it by name.
bool serves(int32_t algorithm, int32_t collective);
// Whether `platform`'s backend runs `algorithm` (codes.def): on "cpu" those with a host shape, on "gpu" every one.
bool runs_on(std::string_view platform, int32_t algorithm);

// What a GPU communicator has beyond memory channels, as codes.def's `needs` column asks: port channels (where it
// was made with them) and a SwitchChannel (emulated where its world has at most kMaxSwitchMembers ranks,
// runtime/gpu/channel_tables.h; none above).
struct Channels {
  bool port = false;
  bool switch_channel = false;
};
// A GPU communicator of `world` ranks, made with port channels or not.
Channels gpu_channels(int world, bool port_channels);
// What `algorithm` needs (codes.def's `needs`) that `has` lacks: nullptr when nothing, else "port channels" or "a
// SwitchChannel". The one check of that column: the frontends refuse an algorithm it names (the JAX path's selection
// raises where the call would run it, the NCCL-API library skips a tuning file's rule that names it).
const char* missing_need(int32_t algorithm, const Channels& has);

// selection.def's rules, in file order.
const std::vector<Rule>& builtin_rules();
// selection.def's protocol rows, in file order (kernels/collectives/protocol.h: an algorithm chosen by size on GPUs
// runs a call's blocks as the first matching row says).
const std::vector<collectives::ProtocolRow>& protocol_rules();
// selection.def's in-place rows, in file order (kernels/collectives/protocol.h, in_place_min_rank_bytes).
const std::vector<collectives::InPlaceRow>& in_place_rules();
// The algorithm `algorithm` runs as on `platform` for `call` (kernels/collectives/protocol.h, as the launchers
// apply it), or nullopt where it is its own.
std::optional<int32_t> protocol_of(int32_t algorithm, std::string_view platform, const collectives::ProtocolCall& call);

// The algorithm of a call: the first rule of `tuned` that matches the call decides; then, for a GPU call between
// ranks that share a GPU (`shares_gpu`), selection.def's shared-GPU rows (the one-GPU topology's measurements); then
// the first matching rule of the built-in table. A rule that says "lax" decides nothing where `lax_runs` is false
// (processes that share a GPU, where NVIDIA's NCCL refuses the communicator). Without a deciding rule: "lax" where
// it runs, else the shared-GPU rows' algorithm of the collective where the platform runs it, else "lax".
// `algorithm` views the deciding rule's name (valid while `tuned` lives) or static text.
struct Choice {
  std::string_view algorithm;
  int32_t code;
};
Choice choose(const std::vector<Rule>& tuned, int32_t collective, std::string_view platform, uint64_t nbytes,
              int world, bool lax_runs, bool shares_gpu);

// A digest of the built-in rules compiled in (every field of selection.def's rule and shared-GPU rows): ranks built
// from different tables would choose differently (the NCCL-API library's agreement fields).
std::string builtin_rules_digest();

}  // namespace jax_mscclpp::select
