// What the library's GPU waits do past the timeout (TimeoutPolicy, kernels/include/jax_mscclpp/error_record.cuh),
// and the warning line of a late wait.
//
// Contracts:
//   - library_timeout_policy(): NVIDIA's NCCL waits for a late peer as long as it takes and leaves the decision to
//     the client (ncclCommGetAsyncError, ncclCommAbort); a library standing in for it must not fail a job that it
//     would run. So JAX_MSCCLPP_NCCL_ON_TIMEOUT (settings.def): "wait" or "fail" where set; unset, kFail where the
//     user set JAX_MSCCLPP_TIMEOUT_S (a bound asked for is kept: trap, or stop with JAX_MSCCLPP_TRAP_ON_FAILURE=0),
//     else kWait. A value that is neither: as if unset, with a line on stderr. Read when a communicator's rank is
//     made (RuntimeCommunicator), per rank like the timeout: not one of the fields ranks must agree on.
//   - Under kWait a wait past JAX_MSCCLPP_TIMEOUT_S publishes the rank's late report and goes on; nothing fails, so
//     ncclCommGetAsyncError stays ncclSuccess. late_wait_warning() words the line the library prints for it
//     (report_late_wait, our_runtime.h) from the report's description (runtime_config.h, describe_late).
#pragma once

#include <cstdio>
#include <cstring>
#include <string>

#include "jax_mscclpp/error_record.cuh"
#include "jax_mscclpp/settings.h"

namespace jax_mscclpp::nccl {

inline TimeoutPolicy library_timeout_policy() {
  if (const char* value = setting_value(Setting::kNcclOnTimeout)) {
    if (std::strcmp(value, "wait") == 0) return TimeoutPolicy::kWait;
    if (std::strcmp(value, "fail") == 0) return TimeoutPolicy::kFail;
    std::fprintf(stderr, "jax_mscclpp libnccl.so.2: ignoring %s=\"%s\" (wait or fail); using its default\n",
                 setting_name(Setting::kNcclOnTimeout), value);
  }
  return setting_value(Setting::kTimeout) != nullptr ? TimeoutPolicy::kFail : TimeoutPolicy::kWait;
}

inline const char* timeout_policy_name(TimeoutPolicy policy) {
  return policy == TimeoutPolicy::kWait ? "wait" : "fail";
}

// One line: the late wait as `description` ("jax_mscclpp: rank r has waited ...") says it, and that the library goes
// on waiting, as NVIDIA's NCCL does, until the peer comes or the client aborts.
inline std::string late_wait_warning(const std::string& description) {
  const std::string prefix = "jax_mscclpp: ";
  const std::string what =
      description.compare(0, prefix.size(), prefix) == 0 ? description.substr(prefix.size()) : description;
  return "jax_mscclpp libnccl.so.2: warning: " + what + "; the library keeps waiting, as NVIDIA's NCCL does for a " +
         "late peer (" + setting_name(Setting::kNcclOnTimeout) + "=wait): the operation completes when the peer " +
         "comes, ncclCommAbort ends it";
}

}  // namespace jax_mscclpp::nccl
