// The one place that decides who runs a communication operation (the OPERATION rows of api_functions.def): the real
// NCCL, or our runtime.
//
// This is where our runtime plugs in. route_of is called first by every operation, with the communicator the
// caller passed (ours or foreign); it answers kOurRuntime only for an operation our runtime will run on that
// communicator (one of ours, with OurCommunicator::runtime attached, for an operation, size and dtype it has an
// algorithm for). Today no runtime is attached and it always answers kRealNccl. Inside a group (group_depth.h),
// our runtime is to queue what is routed to it and launch it at the outermost ncclGroupEnd.
#pragma once

#include "api_function.h"
#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

enum class Route { kRealNccl, kOurRuntime };

Route route_of(ApiFunction operation, ncclComm_t comm);

// What an operation routed to our runtime returns while the runtime is not built: ncclInternalError, with a last
// error naming the operation.
ncclResult_t run_on_our_runtime(ApiFunction operation);

}  // namespace jax_mscclpp::nccl
