#include "our_communicator.h"

#include <new>

namespace jax_mscclpp::nccl {

ncclComm_t wrap_real_communicator(ncclComm_t real) {
  if (real == nullptr) return nullptr;
  auto* ours = new (std::nothrow) OurCommunicator{kOurCommunicatorMagic, nullptr, real, nullptr};
  if (ours == nullptr) return real;
  ours->self = ours;
  return reinterpret_cast<ncclComm_t>(ours);
}

ncclComm_t wrap_runtime_communicator(RuntimeCommunicator* runtime, ncclComm_t real) {
  auto* ours = new (std::nothrow) OurCommunicator{kOurCommunicatorMagic, nullptr, real, runtime};
  if (ours == nullptr) return nullptr;
  ours->self = ours;
  return reinterpret_cast<ncclComm_t>(ours);
}

OurCommunicator* our_communicator(ncclComm_t comm) {
  if (comm == nullptr) return nullptr;
  auto* candidate = reinterpret_cast<OurCommunicator*>(comm);
  if (candidate->magic != kOurCommunicatorMagic || candidate->self != candidate) return nullptr;
  return candidate;
}

ncclComm_t real_communicator(ncclComm_t comm) {
  OurCommunicator* ours = our_communicator(comm);
  return ours != nullptr ? ours->real : comm;
}

void release_our_communicator(OurCommunicator* ours) {
  ours->magic = 0;
  ours->self = nullptr;
  delete ours;
}

}  // namespace jax_mscclpp::nccl
