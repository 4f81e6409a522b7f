// The process-wide registry of host communicators, looked up by the FFI handlers by `comm_id` (a custom-call
// attribute). Thread-safe: XLA calls handlers from one thread per device at once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "host_communicator.h"

namespace jax_mscclpp {

// Registers a host communicator under `id` (replacing none: ids are never reused).
void register_host_communicator(std::shared_ptr<host::HostCommunicator> comm);
// nullptr when no communicator has that id (never created, or destroyed).
std::shared_ptr<host::HostCommunicator> find_host_communicator(int64_t id);
// Frees a communicator; calls in flight keep it alive until they return.
bool destroy_communicator(int64_t id);
std::vector<int64_t> live_communicators();

}  // namespace jax_mscclpp
