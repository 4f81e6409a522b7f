// What this library exports besides the NCCL API, for jax_mscclpp's Python side and its tests: the state of the
// calling thread and process as this library sees it, and the real NCCL's opening. Only
// jax_mscclpp_nccl_open_real_library opens the real NCCL.
#pragma once

#include "jax_mscclpp_nccl/nccl_api.h"

#ifdef __cplusplus
extern "C" {
#endif

// The calling thread's group depth (ncclGroupStart minus ncclGroupEnd, never below 0).
int jax_mscclpp_nccl_group_depth(void);
// 1 when `comm` is a communicator this library made (it wraps the real library's), 0 otherwise.
int jax_mscclpp_nccl_is_ours(ncclComm_t comm);
// Which runtime runs `comm` and why, as its setup decided ("jax_mscclpp's runtime: one host, NVIDIA's NCCL beside
// it", "NVIDIA's NCCL: ranks 0 and 1 are on different hosts ..."); "" when it is not one of ours made from our id or
// its setup has not completed. Valid until the communicator is destroyed.
const char* jax_mscclpp_nccl_backend(ncclComm_t comm);
// The real library's communicator behind `comm` (`comm` itself when it is not ours).
ncclComm_t jax_mscclpp_nccl_real_communicator(ncclComm_t comm);
// The path the real NCCL was opened from; "" before the first call that needed it, or when it could not be opened.
const char* jax_mscclpp_nccl_real_library(void);

// 1 when ids made here are our runtime's, so that communicators made from them run on it (built with the CUDA
// parts, and JAX_MSCCLPP_NCCL_RUNTIME is not 0), else 0.
int jax_mscclpp_nccl_runtime_enabled(void);
// The calls our runtime ran, one "function algorithm count" line each, and those on communicators of ours that went
// to the real NCCL (algorithm "nccl"); "" when there are none or the runtime is not built. Valid until the calling
// thread's next call of this function.
const char* jax_mscclpp_nccl_call_counts(void);

// Why the calls of `comm` between ranks of several processes cannot run in place on registered buffers ("" where
// they can: each rank a process of its own on one host, runtime/gpu/allocation_exchange.h), with *in_place and
// *through_scratch (either may be null) the rank's calls that could and did, or that copied through scratch because
// some rank's buffers were not reachable. Valid until the calling thread's next call of this function.
const char* jax_mscclpp_nccl_in_place_between_processes(ncclComm_t comm, unsigned long long* in_place,
                                                        unsigned long long* through_scratch);

// Opens the real NCCL now rather than at the first call needing it. enable_nccl_backend() calls it before JAX's
// CUDA plugin loads NVIDIA's library by the same path: the process then holds that library as opened here, with
// RTLD_DEEPBIND, so its calls to its own exports stay inside it (loaded first without it, they would bind to ours).
// ncclSystemError, with ncclGetLastError's text saying why, when it cannot be opened.
ncclResult_t jax_mscclpp_nccl_open_real_library(void);

#ifdef __cplusplus
}
#endif
