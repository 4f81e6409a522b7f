// How a call of the host backend ended: its kind of failure, typed, and the message that words it. The frontend
// codes the kind as its own (ffi/host_failure_status.h: XLA's status codes); the message only informs.
//
// The kind is the failure's at the root: a rank whose call ended, or was refused, because another rank's call failed
// the group (HostGroup::mark_broken) carries that failure's kind, with that failure's message after its own words.
#pragma once

#include <cstdint>
#include <string>

namespace jax_mscclpp::host {

enum class FailureKind : int32_t {
  kNone,       // the call ran
  kOutOfStep,  // ranks in different calls (a mismatch), or two calls of one rank at once: the ranks are out of step
  kTimedOut,   // a wait outlived the time limit (a lost or stopped peer)
  kRefused,    // a call this backend does not run (its partition, algorithm, operands or plan), refused before it ran
  kInjected,   // the rank stopped on a fault a test injected (the testing build's hooks, host_communicator.h)
};

struct HostFailure {
  FailureKind kind = FailureKind::kNone;
  std::string message;  // empty for kNone

  bool failed() const { return kind != FailureKind::kNone; }
};

}  // namespace jax_mscclpp::host
