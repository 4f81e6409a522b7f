#include "selection_table.h"

#include "jax_mscclpp/codes.h"

namespace jax_mscclpp::nccl {
namespace {

using namespace jax_mscclpp::codes;

constexpr int32_t kLax = -1;
constexpr int kCpu = 0, kGpu = 1;

struct Rule {
  int32_t collective;
  int platform;
  int64_t max_bytes;  // -1: no bound
  int32_t algorithm;  // kLax: the framework's own
  int world;          // 0: any
};

constexpr Rule kRules[] = {
#define JAX_MSCCLPP_SELECTION_RULE(collective, platform, max_bytes, algorithm, world) \
  {collective, platform, max_bytes, algorithm, world},
#define JAX_MSCCLPP_ANY_SIZE_ALGORITHM(collective, algorithm)
#include "jax_mscclpp/selection.def"
};

struct AnySize {
  int32_t collective;
  int32_t algorithm;
};

constexpr AnySize kAnySize[] = {
#define JAX_MSCCLPP_SELECTION_RULE(collective, platform, max_bytes, algorithm, world)
#define JAX_MSCCLPP_ANY_SIZE_ALGORITHM(collective, algorithm) {collective, algorithm},
#include "jax_mscclpp/selection.def"
};

}  // namespace

int32_t select_algorithm(const std::vector<TunedRule>& tuned, int32_t collective, uint64_t nbytes, int world,
                         bool nccl_can_run) {
  // The tuned rules (any world), then the built-in GPU rules, first match first, as the JAX path's selection. A
  // rule that does not match, or says kLax where NCCL cannot run, decides nothing; so the first kLax that decides
  // is the first match's.
  int32_t chosen = -1;
  auto decides = [&](int32_t rule_collective, int64_t max_bytes, int32_t algorithm, int rule_world) {
    if (rule_collective != collective || (rule_world != 0 && rule_world != world) ||
        (max_bytes >= 0 && nbytes > static_cast<uint64_t>(max_bytes)))
      return false;
    if (algorithm == kLax && !nccl_can_run) return false;
    chosen = algorithm;
    return true;
  };
  for (const TunedRule& rule : tuned)
    if (decides(rule.collective, rule.max_bytes, rule.algorithm, 0)) return chosen;
  for (const Rule& rule : kRules)
    if (rule.platform == kGpu && decides(rule.collective, rule.max_bytes, rule.algorithm, rule.world)) return chosen;
  if (nccl_can_run) return -1;  // no rule: the framework's own
  for (const AnySize& any : kAnySize)
    if (any.collective == collective) return any.algorithm;
  return -1;
}

std::string selection_rules_digest() {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over every field of every row
  auto mix = [&h](int64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ static_cast<uint8_t>(v >> (8 * b))) * 1099511628211ull;
  };
  for (const Rule& r : kRules) mix(r.collective), mix(r.platform), mix(r.max_bytes), mix(r.algorithm), mix(r.world);
  for (const AnySize& a : kAnySize) mix(a.collective), mix(a.algorithm);
  return std::to_string(h);
}

}  // namespace jax_mscclpp::nccl
