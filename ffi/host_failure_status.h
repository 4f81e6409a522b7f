// The status of a failed host-backend call as XLA reports it: a status code that says what kind of failure it was,
// and the message with what to do next.
//
// Codes, by the failure at the root (a rank whose call was refused or ended because of another rank's failure
// carries that failure's message): ABORTED for ranks in different calls (a mismatch, or two calls of one rank at
// once: the ranks are out of step), DEADLINE_EXCEEDED for a wait that timed out (a lost or stopped peer),
// FAILED_PRECONDITION for a call refused because an earlier failure of another kind left the communicator unusable,
// INVALID_ARGUMENT for a call the backend does not run (or ABORTED if the group is left unusable anyway). A failure
// that leaves the communicator's group unusable ends its message with kRecoveryAdvice.
#pragma once

#include <string>

#include "call_signature.h"
#include "xla/ffi/api/ffi.h"

namespace jax_mscclpp {

inline constexpr const char* kConcurrentCallsPrefix = "jax_mscclpp: two collective calls";
inline constexpr const char* kTimeoutPrefix = "jax_mscclpp: timeout after";
inline constexpr const char* kUnusableMarker = " is unusable after an earlier failure";

// How to go on after a failure (jax_mscclpp/recovery.py): programs lowered afterwards get a fresh communicator;
// programs compiled before it keep the failed one until reset() lowers them again.
inline constexpr const char* kRecoveryAdvice =
    " [the process stays usable: a program lowered from now on gets a fresh communicator for this mesh; "
    "jax_mscclpp.reset() destroys the communicators and clears JAX's caches, so that programs compiled before "
    "this failure are lowered again]";

inline bool mentions(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

// `broken`: whether the failure left the group unusable. A rank whose wait ended because another rank failed
// carries that rank's message after its own words, so the kind is found anywhere in the message.
inline xla::ffi::ErrorCode host_failure_code(const std::string& message, bool broken) {
  using xla::ffi::ErrorCode;
  if (mentions(message, host::kMismatchPrefix) || mentions(message, kConcurrentCallsPrefix)) return ErrorCode::kAborted;
  if (mentions(message, kTimeoutPrefix)) return ErrorCode::kDeadlineExceeded;
  if (mentions(message, kUnusableMarker)) return ErrorCode::kFailedPrecondition;
  return broken ? ErrorCode::kAborted : ErrorCode::kInvalidArgument;
}

// The error XLA reports for a failed call with `message`; the recovery advice when the group is left unusable.
inline xla::ffi::Error host_failure_error(const std::string& message, bool broken) {
  const xla::ffi::ErrorCode code = host_failure_code(message, broken);
  return xla::ffi::Error(code, broken ? message + kRecoveryAdvice : message);
}

}  // namespace jax_mscclpp
