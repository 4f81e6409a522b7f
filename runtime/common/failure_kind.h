// What kind of failure ended or refused a call, at its root: one list for the host reference backend
// (runtime/reference/host_failure.h) and the GPU runtime (runtime/gpu/call.h, CallResult). Each frontend codes a kind
// as its own: XLA's status codes (ffi/host_failure_status.h, failure_code), NCCL's result codes (nccl/).
#pragma once

#include <cstdint>

namespace jax_mscclpp {

enum class FailureKind : int32_t {
  kNone,       // the call ran
  kOutOfStep,  // ranks in different calls (a mismatch, a peer that failed the communicator, ragged sizes the device
               // refused), or two calls of one rank at once: the ranks are out of step
  kTimedOut,   // a wait outlived the time limit (a lost or stopped peer)
  kRefused,    // a call the backend does not run (its partition, algorithm, operands or plan), refused before it ran
  kInjected,   // the rank stopped on a fault a test injected (the testing build's hooks, host_communicator.h)
};

}  // namespace jax_mscclpp
