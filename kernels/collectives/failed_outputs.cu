// rank_failed_word (collective.h): where FailedOutputs::failed points.
#include "collectives/collective.h"
#include "jax_mscclpp/call_inbox.cuh"

namespace jax_mscclpp {

const uint64_t* rank_failed_word(const CollectiveContext& ctx) {
  if (ctx.scratch == nullptr) return nullptr;
  return failed_word(ctx.scratch + call_inbox_offset(ctx.scratch_bytes));
}

}  // namespace jax_mscclpp
