// How deep the calling thread is in ncclGroupStart / ncclGroupEnd, as NCCL counts it (groups nest; only the
// outermost ncclGroupEnd launches). Kept for our runtime, which queues the operations routed to it inside a group
// and launches them at the outermost end.
//
// ncclGroupStart enters when the real library accepted it; ncclGroupEnd and ncclGroupSimulateEnd leave whatever the
// real library answered (NCCL closes the group on error too); leaving at depth 0 stays at 0.
#pragma once

namespace jax_mscclpp::nccl {

void enter_group();
void leave_group();
int group_depth();

}  // namespace jax_mscclpp::nccl
