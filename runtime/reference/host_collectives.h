// The collective algorithms of the reference backend, on HostMemoryChannels.
//
// Every algorithm moves data through peers' registered scratch in rounds. Round e (the rank's epoch, advanced
// once per round) uses scratch half e & 1, so round e+1 never overwrites data of round e that a slower peer is
// still reading; round e+2 may reuse the half because it starts only after every peer signalled in round e+1,
// which each peer does after it finished reading round e. Messages larger than one round are pipelined.
#pragma once

#include "collective_types.h"
#include "host_communicator.h"
#include "host_failure.h"

namespace jax_mscclpp::host {

// Runs `call` for XLA partition `partition`. kNone on success, else the failure's kind (host_failure.h) and a message
// that names the collective, algorithm, rank, peer and epoch (a wait that outlived `timeout_s`, mismatched calls,
// or a misuse).
HostFailure run_collective(HostCommunicator& comm, int partition, const CollectiveCall& call, double timeout_s);

}  // namespace jax_mscclpp::host
