// Execution plans (jax_mscclpp/dsl/PLAN.md) on the host reference backend: the plans in their decoded form
// (runtime/common/host_plan.h, HostPlan), HostPlanInstance adds the per-(group, rank) channel semaphores of one
// communicator, and run_plan() interprets one rank's part of a call with the semantics of PLAN.md.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collective_types.h"
#include "host_communicator.h"
#include "host_failure.h"
#include "host_plan.h"
#include "host_semaphore.h"

namespace jax_mscclpp::host {

// A plan bound to one communicator: every (group, rank) gets one inbound semaphore per channel endpoint.
struct HostPlanInstance {
  struct Endpoints {
    std::unique_ptr<HostSemaphore[]> inbound;  // [channels]
    std::vector<uint64_t> expected;            // [channels]
  };
  std::shared_ptr<const HostPlan> plan;
  std::vector<std::vector<Endpoints>> endpoints;  // [group][rank]

  HostPlanInstance(std::shared_ptr<const HostPlan> plan, int num_groups);
};

// Runs rank `partition`'s part of `call` with `instance` (bound as `plan_id`); kNone on success, else the failure's
// kind (host_failure.h) and a message naming the rank, thread block, operation and epoch, or the peer whose call
// differs (call_signature.h).
HostFailure run_plan(HostCommunicator& comm, HostPlanInstance& instance, int64_t plan_id, int partition,
                     const CollectiveCall& call, double timeout_s);

}  // namespace jax_mscclpp::host
