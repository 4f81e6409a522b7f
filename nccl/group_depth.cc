#include "group_depth.h"

namespace jax_mscclpp::nccl {
namespace {

thread_local int depth = 0;

}  // namespace

void enter_group() { ++depth; }

void leave_group() {
  if (depth > 0) --depth;
}

int group_depth() { return depth; }

}  // namespace jax_mscclpp::nccl
