// Communicators made through this library: the ncclComm_t handed to the caller points at an OurCommunicator, which
// holds the real library's communicator, our runtime's, or both.
//
// An OurCommunicator begins with the magic word kOurCommunicatorMagic ("JMSCCLPP" in ASCII) followed by its own
// address; a handle is ours only when both match, so a communicator the real library made directly (its first
// bytes are the real library's) passes through every call untouched. Handles must be valid communicators of
// either kind (NCCL's own contract); a null handle is never ours.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

constexpr std::uint64_t kOurCommunicatorMagic = 0x5050'4C43'4353'4D4AULL;  // bytes "JMSCCLPP" in memory order

class RuntimeCommunicator;  // runtime/runtime_communicator.h
struct PendingSetup;        // runtime/our_runtime.cc: a setup that runs on another thread

// `setup` is ncclInProgress while a setup of our id runs elsewhere (a non-blocking config, or an init inside a
// group, until the outermost ncclGroupEnd): `real`, `runtime`, `setup_error` and `backend` are written by that setup
// before it stores the result into `setup` (release); a caller reads `setup` first (acquire; ncclCommGetAsyncError
// does), and only then the rest. NCCL's rule makes that the caller's order: a communicator is not used before its
// init completed.
struct OurCommunicator {
  std::uint64_t magic;            // kOurCommunicatorMagic while alive, 0 once released
  const OurCommunicator* self;    // this object's own address
  ncclComm_t real;                // the real library's communicator; null for one of ours where it cannot run
  RuntimeCommunicator* runtime;   // our runtime's communicator for the same ranks, or null (the real one alone)
  std::atomic<int> setup{ncclSuccess};  // ncclInProgress, or the setup's result
  std::string setup_error;        // the failed setup's text (ncclGetLastError of this communicator)
  std::string backend;            // which runtime runs it and why (jax_mscclpp_nccl_backend)
  PendingSetup* pending = nullptr;  // the setup running elsewhere, until it is collected
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
// Whether `ours` is ready for calls (its setup completed): ncclSuccess, ncclInProgress, or the setup's failure.
inline ncclResult_t setup_state(const OurCommunicator* ours) {
  return static_cast<ncclResult_t>(ours->setup.load(std::memory_order_acquire));
}
// One of ours whose setup completed with our runtime's communicator; null for any other.
inline OurCommunicator* with_runtime(ncclComm_t comm) {
  OurCommunicator* ours = our_communicator(comm);
  return ours != nullptr && setup_state(ours) == ncclSuccess && ours->runtime != nullptr ? ours : nullptr;
}
// One of ours with our runtime's communicator and no real one (its queries are answered here); null for any other.
inline OurCommunicator* runtime_only(ncclComm_t comm) {
  OurCommunicator* ours = with_runtime(comm);
  return ours != nullptr && ours->real == nullptr ? ours : nullptr;
}
// Frees one of ours (after the real library destroyed what it wraps); its magic is cleared first.
void release_our_communicator(OurCommunicator* ours);

}  // namespace jax_mscclpp::nccl
