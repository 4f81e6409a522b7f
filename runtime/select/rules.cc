#include "select/rules.h"

#include <cctype>
#include <cstring>
#include <iterator>

#include "collectives/protocol.h"
#include "jax_mscclpp/codes.h"
#include "jax_mscclpp/switch_channel.cuh"

namespace jax_mscclpp::select {
namespace {

using namespace jax_mscclpp::codes;

constexpr int kCpu = 0, kGpu = 1;  // selection.def's platforms
constexpr const char* kPlatformNames[] = {"cpu", "gpu"};

struct Row {
  int32_t collective;
  int platform;
  int64_t max_bytes;  // -1: no bound
  int32_t algorithm;  // kLax: the framework's own
  int world;          // 0: any
};

constexpr Row kRows[] = {
#define JAX_MSCCLPP_SELECTION_RULE(collective, platform, max_bytes, algorithm, world) \
  {collective, platform, max_bytes, algorithm, world},
#define JAX_MSCCLPP_SHARED_GPU_RULE(collective, max_bytes, algorithm, world)
#define JAX_MSCCLPP_PROTOCOL_RULE(algorithm, collective, placement, world, ll_max_block_bytes, ll_algorithm, hb_algorithm)
#include "jax_mscclpp/selection.def"
};

// Ranks that share a GPU, and where lax cannot run: the collective's first row whose bytes and world match (a row
// as a GPU rule matches).
struct SharedGpuRow {
  int32_t collective;
  int64_t max_bytes;  // -1: no bound
  int32_t algorithm;
  int world;          // 0: any

  bool matches(int32_t call_collective, uint64_t nbytes, int call_world) const {
    return collective == call_collective && (world == 0 || call_world == 0 || world == call_world) &&
           (max_bytes < 0 || nbytes <= static_cast<uint64_t>(max_bytes));
  }
};

constexpr SharedGpuRow kSharedGpuRows[] = {
#define JAX_MSCCLPP_SELECTION_RULE(collective, platform, max_bytes, algorithm, world)
#define JAX_MSCCLPP_SHARED_GPU_RULE(collective, max_bytes, algorithm, world) \
  {collective, max_bytes, algorithm, world},
#define JAX_MSCCLPP_PROTOCOL_RULE(algorithm, collective, placement, world, ll_max_block_bytes, ll_algorithm, hb_algorithm)
#include "jax_mscclpp/selection.def"
};

bool equal_ignoring_case(std::string_view a, const char* b) {
  const size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace

bool Rule::matches(int32_t call_collective, std::string_view call_platform, uint64_t nbytes, int call_world) const {
  return collective == call_collective && platform == call_platform &&
         (world == 0 || call_world == 0 || world == call_world) &&
         (max_bytes < 0 || nbytes <= static_cast<uint64_t>(max_bytes));
}

Rule make_rule(int32_t collective, std::string platform, int64_t max_bytes, std::string algorithm, int world) {
  Rule r;
  r.collective = collective;
  r.platform = std::move(platform);
  r.max_bytes = max_bytes < 0 ? -1 : max_bytes;
  r.code = algorithm_code(algorithm);
  r.algorithm = std::move(algorithm);
  r.world = world < 0 ? 0 : world;
  return r;
}

// Collective names are matched ignoring case (a tuning file's "ALL_REDUCE" is all_reduce); algorithm names exactly.
int32_t collective_code(std::string_view name) {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, name_, ...)                         \
  if (equal_ignoring_case(name, name_)) return code;
#include "jax_mscclpp/codes.def"
  return -1;
}

const char* collective_name(int32_t collective) {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, name_, ...)                         \
  if (collective == code) return name_;
#include "jax_mscclpp/codes.def"
  return nullptr;
}

int32_t algorithm_code(std::string_view name) {
  if (name == "lax") return kLax;
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name_, collectives, host, needs) \
  if (name == name_) return code;
#include "jax_mscclpp/codes.def"
  return kNotNative;
}

const char* algorithm_name(int32_t algorithm) {
  if (algorithm == kLax) return "lax";
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name_, collectives, host, needs) \
  if (algorithm == code) return name_;
#include "jax_mscclpp/codes.def"
  return nullptr;
}

bool serves(int32_t algorithm, int32_t collective) {
  if (collective < 0 || collective >= 32) return false;
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name_, collectives, host, needs) \
  if (algorithm == code) return ((collectives) >> collective & 1) != 0;
#include "jax_mscclpp/codes.def"
  return false;
}

bool runs_on(std::string_view platform, int32_t algorithm) {
  const bool cpu = platform == "cpu";
  if (!cpu && platform != "gpu") return false;
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name_, collectives, host, needs) \
  if (algorithm == code) return !cpu || std::strcmp(#host, "kHostNone") != 0;
#include "jax_mscclpp/codes.def"
  return false;
}

Channels gpu_channels(int world, bool port_channels) { return {port_channels, world <= kMaxSwitchMembers}; }

const char* missing_need(int32_t algorithm, const Channels& has) {
  enum Need { kNeedsNothing, kNeedsPortChannels, kNeedsSwitchChannel };
  Need need = kNeedsNothing;
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name_, collectives, host, needs) \
  if (algorithm == code) need = needs;
#include "jax_mscclpp/codes.def"
  switch (need) {
    case kNeedsNothing: return nullptr;
    case kNeedsPortChannels: return has.port ? nullptr : "port channels";
    case kNeedsSwitchChannel: return has.switch_channel ? nullptr : "a SwitchChannel";
  }
  return nullptr;
}

const std::vector<Rule>& builtin_rules() {
  static const std::vector<Rule> rules = [] {
    std::vector<Rule> out;
    for (const Row& row : kRows)
      out.push_back(make_rule(row.collective, kPlatformNames[row.platform], row.max_bytes,
                              algorithm_name(row.algorithm), row.world));
    return out;
  }();
  return rules;
}

const std::vector<collectives::ProtocolRow>& protocol_rules() {
  static const std::vector<collectives::ProtocolRow> rules(std::begin(collectives::kProtocolRows),
                                                            std::end(collectives::kProtocolRows));
  return rules;
}

const std::vector<collectives::InPlaceRow>& in_place_rules() {
  static const std::vector<collectives::InPlaceRow> rules(std::begin(collectives::kInPlaceRows),
                                                           std::end(collectives::kInPlaceRows));
  return rules;
}

std::optional<int32_t> protocol_of(int32_t algorithm, std::string_view platform, const collectives::ProtocolCall& call) {
  if (platform != "gpu" || algorithm < 0) return std::nullopt;
  const int32_t runs_as = collectives::protocol_algorithm(algorithm, call);
  if (runs_as == algorithm) return std::nullopt;
  return runs_as;
}

// The first shared-GPU row that matches the call, where the platform runs its algorithm.
static std::optional<Choice> shared_gpu_choice(int32_t collective, std::string_view platform, uint64_t nbytes, int world) {
  for (const SharedGpuRow& row : kSharedGpuRows)
    if (row.matches(collective, nbytes, world) && runs_on(platform, row.algorithm))
      return Choice{algorithm_name(row.algorithm), row.algorithm};
  return std::nullopt;
}

Choice choose(const std::vector<Rule>& tuned, int32_t collective, std::string_view platform, uint64_t nbytes,
              int world, bool lax_runs, bool shares_gpu) {
  auto first_rule = [&](const std::vector<Rule>& rules) -> std::optional<Choice> {
    for (const Rule& rule : rules)
      if (rule.matches(collective, platform, nbytes, world) && (rule.code != kLax || lax_runs))
        return Choice{rule.algorithm, rule.code};
    return std::nullopt;
  };
  if (auto tuned_choice = first_rule(tuned)) return *tuned_choice;
  if (shares_gpu && platform == "gpu")
    if (auto shared = shared_gpu_choice(collective, platform, nbytes, world)) return *shared;
  if (auto builtin = first_rule(builtin_rules())) return *builtin;
  if (!lax_runs)
    if (auto shared = shared_gpu_choice(collective, platform, nbytes, world)) return *shared;
  return {"lax", kLax};
}

std::string builtin_rules_digest() {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over every field of every row
  auto mix = [&h](int64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ static_cast<uint8_t>(v >> (8 * b))) * 1099511628211ull;
  };
  for (const Row& r : kRows) mix(r.collective), mix(r.platform), mix(r.max_bytes), mix(r.algorithm), mix(r.world);
  for (const SharedGpuRow& a : kSharedGpuRows) mix(a.collective), mix(a.max_bytes), mix(a.algorithm), mix(a.world);
  return std::to_string(h);
}

}  // namespace jax_mscclpp::select
