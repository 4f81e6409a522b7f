#include "jax_mscclpp_nccl/introspection.h"

#include "group_depth.h"
#include <string>

#include "our_communicator.h"
#include "our_runtime.h"
#include "real_nccl.h"

using namespace jax_mscclpp::nccl;

#define JAX_MSCCLPP_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

JAX_MSCCLPP_NCCL_EXPORT int jax_mscclpp_nccl_group_depth(void) { return group_depth(); }

JAX_MSCCLPP_NCCL_EXPORT int jax_mscclpp_nccl_is_ours(ncclComm_t comm) { return our_communicator(comm) != nullptr; }

JAX_MSCCLPP_NCCL_EXPORT const char* jax_mscclpp_nccl_backend(ncclComm_t comm) {
  const OurCommunicator* ours = our_communicator(comm);
  return ours != nullptr && setup_state(ours) != ncclInProgress ? ours->backend.c_str() : "";
}

JAX_MSCCLPP_NCCL_EXPORT ncclComm_t jax_mscclpp_nccl_real_communicator(ncclComm_t comm) {
  return real_communicator(comm);
}

JAX_MSCCLPP_NCCL_EXPORT const char* jax_mscclpp_nccl_real_library(void) { return real_library_path(); }

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t jax_mscclpp_nccl_open_real_library(void) { return open_real_library(); }

JAX_MSCCLPP_NCCL_EXPORT const char* jax_mscclpp_nccl_call_counts(void) {
  thread_local std::string text;
  text = call_counts();
  return text.c_str();
}

JAX_MSCCLPP_NCCL_EXPORT int jax_mscclpp_nccl_runtime_enabled(void) { return our_runtime_enabled() ? 1 : 0; }

JAX_MSCCLPP_NCCL_EXPORT const char* jax_mscclpp_nccl_in_place_between_processes(ncclComm_t comm,
                                                                                unsigned long long* in_place,
                                                                                unsigned long long* through_scratch) {
  thread_local std::string text;
  uint64_t ran = 0, copied = 0;
  const OurCommunicator* ours = our_communicator(comm);
  text = ours != nullptr && ours->runtime != nullptr ? in_place_between_processes(ours, &ran, &copied)
                                                     : "not a communicator of jax_mscclpp's runtime";
  if (in_place != nullptr) *in_place = ran;
  if (through_scratch != nullptr) *through_scratch = copied;
  return text.c_str();
}
