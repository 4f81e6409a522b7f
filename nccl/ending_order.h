// The order in which ncclCommDestroy and ncclCommAbort end the parts of a communicator of ours: the real library's
// communicator beside it (where there is one) and our runtime's (where there is one), then the handle.
//
// Contracts:
//   - destroy: the real library's destroy first; ours goes only once that succeeded (on failure the caller still
//     holds a valid handle, to retry or abort): our runtime's part, orderly (its outstanding operations complete
//     first: our_runtime.h, release_runtime), then the handle.
//   - abort: our runtime's part first, not orderly (its kernels are stopped from the host and the call returns at
//     once), so that the real library's abort, which may wait for the device, never waits behind a kernel of ours
//     stuck on a peer; then the real library's abort; the handle goes once that succeeded (on failure the handle
//     stays, with the real communicator alone).
#pragma once

#include <functional>

#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

struct CommunicatorParts {
  std::function<ncclResult_t()> end_real;             // the real library's destroy or abort; ncclSuccess without one
  std::function<void(bool orderly)> release_runtime;  // our runtime's part; nothing without one
  std::function<void()> release_handle;               // the handle of ours
};

inline ncclResult_t end_in_order(bool aborting, const CommunicatorParts& parts) {
  if (aborting) parts.release_runtime(/*orderly=*/false);
  const ncclResult_t result = parts.end_real();
  if (result != ncclSuccess) return result;
  if (!aborting) parts.release_runtime(/*orderly=*/true);
  parts.release_handle();
  return ncclSuccess;
}

}  // namespace jax_mscclpp::nccl
