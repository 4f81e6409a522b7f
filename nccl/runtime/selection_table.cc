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

bool matches(const Rule& rule, int32_t collective, uint64_t nbytes, int world) {
  return rule.collective == collective && rule.platform == kGpu && (rule.world == 0 || rule.world == world) &&
         (rule.max_bytes < 0 || nbytes <= static_cast<uint64_t>(rule.max_bytes));
}

}  // namespace

int32_t selected_algorithm(int32_t collective, uint64_t nbytes, int world, bool nccl_can_run) {
  // Every rule before the first match returns nothing, so the first kLax seen is the first match's.
  for (const Rule& rule : kRules) {
    if (!matches(rule, collective, nbytes, world)) continue;
    if (rule.algorithm != kLax) return rule.algorithm;
    if (nccl_can_run) return -1;
  }
  if (nccl_can_run) return -1;  // no rule: the framework's own
  for (const AnySize& any : kAnySize)
    if (any.collective == collective) return any.algorithm;
  return -1;
}

}  // namespace jax_mscclpp::nccl
