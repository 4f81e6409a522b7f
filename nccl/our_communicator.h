// Communicators made through this library: the ncclComm_t handed to the caller points at an OurCommunicator, which
// holds the real library's communicator, our runtime's, or both.
//
// An OurCommunicator begins with the magic word kOurCommunicatorMagic ("JMSCCLPP" in ASCII) followed by its own
// address; a handle is ours only when both match, so a communicator the real library made directly (its first
// bytes are the real library's) passes through every call untouched. Handles must be valid communicators of
// either kind (NCCL's own contract); a null handle is never ours.
#pragma once

#include <cstdint>

#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

constexpr std::uint64_t kOurCommunicatorMagic = 0x5050'4C43'4353'4D4AULL;  // bytes "JMSCCLPP" in memory order

class RuntimeCommunicator;  // runtime/runtime_communicator.h

struct OurCommunicator {
  std::uint64_t magic;            // kOurCommunicatorMagic while alive, 0 once released
  const OurCommunicator* self;    // this object's own address
  ncclComm_t real;                // the real library's communicator; null for one of ours where it cannot run
  RuntimeCommunicator* runtime;   // our runtime's communicator for the same ranks, or null (the real one alone)
};

// A new handle wrapping `real`; `real` itself (unwrapped, then a foreign communicator) if memory runs out, and
// null for null.
ncclComm_t wrap_real_communicator(ncclComm_t real);
// A new handle for our runtime's `runtime` and the real library's `real` (which may be null); null if memory runs
// out.
ncclComm_t wrap_runtime_communicator(RuntimeCommunicator* runtime, ncclComm_t real);
// The OurCommunicator behind `comm`, or nullptr when `comm` is not ours.
OurCommunicator* our_communicator(ncclComm_t comm);
// What the real library knows `comm` as: the wrapped communicator of ours, any other handle unchanged.
ncclComm_t real_communicator(ncclComm_t comm);
// Frees one of ours (after the real library destroyed what it wraps); its magic is cleared first.
void release_our_communicator(OurCommunicator* ours);

}  // namespace jax_mscclpp::nccl
