// How a call of the host backend ended: its kind of failure, typed, and the message that words it. The frontend
// codes the kind as its own (ffi/host_failure_status.h: XLA's status codes); the message only informs.
//
// The kind is the failure's at the root: a rank whose call ended, or was refused, because another rank's call failed
// the group (HostGroup::mark_broken) carries that failure's kind, with that failure's message after its own words.
#pragma once

#include <string>

#include "failure_kind.h"

namespace jax_mscclpp::host {

struct HostFailure {
  FailureKind kind = FailureKind::kNone;
  std::string message;  // empty for kNone

  bool failed() const { return kind != FailureKind::kNone; }
};

}  // namespace jax_mscclpp::host
