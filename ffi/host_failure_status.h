// The status of a failed host-backend call as XLA reports it: a status code that says what kind of failure it was,
// and the message with what to do next.
//
// Codes, by the failure's kind (runtime/common/failure_kind.h: the kind at the root, so a rank whose call was refused
// or ended because of another rank's failure carries that failure's kind; the GPU runtime's refused calls are coded
// alike): ABORTED for ranks in different calls (a mismatch, or two calls of one rank at once: the ranks are out of
// step), DEADLINE_EXCEEDED for a wait that timed out (a lost or stopped peer), INVALID_ARGUMENT for a call the backend
// does not run and for a rank stopped by an injected fault (ABORTED for either where the group is left unusable
// anyway). A failure that leaves the communicator's group unusable ends its message with kRecoveryAdvice.
#pragma once

#include <string>

#include "host_failure.h"
#include "xla/ffi/api/ffi.h"

namespace jax_mscclpp {

// How to go on after a failure (jax_mscclpp/recovery.py): programs lowered afterwards get a fresh communicator;
// programs compiled before it keep the failed one until reset() lowers them again.
inline constexpr const char* kRecoveryAdvice =
    " [the process stays usable: a program lowered from now on gets a fresh communicator for this mesh; "
    "jax_mscclpp.reset() destroys the communicators and clears JAX's caches, so that programs compiled before "
    "this failure are lowered again]";

// `broken`: whether the failure left the group unusable.
inline xla::ffi::ErrorCode failure_code(FailureKind kind, bool broken) {
  using xla::ffi::ErrorCode;
  switch (kind) {
    case FailureKind::kOutOfStep: return ErrorCode::kAborted;
    case FailureKind::kTimedOut: return ErrorCode::kDeadlineExceeded;
    case FailureKind::kNone:
    case FailureKind::kRefused:
    case FailureKind::kInjected: break;
  }
  return broken ? ErrorCode::kAborted : ErrorCode::kInvalidArgument;
}

// The error XLA reports for `failure`; the recovery advice when the group is left unusable.
inline xla::ffi::Error host_failure_error(const host::HostFailure& failure, bool broken) {
  return xla::ffi::Error(failure_code(failure.kind, broken),
                         broken ? failure.message + kRecoveryAdvice : failure.message);
}

}  // namespace jax_mscclpp
