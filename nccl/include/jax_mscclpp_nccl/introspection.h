// What this library exports besides the NCCL API, for jax_mscclpp's Python side and its tests: the state of the
// calling thread and process as this library sees it. None of these functions opens the real NCCL.
#pragma once

#include "jax_mscclpp_nccl/nccl_api.h"

#ifdef __cplusplus
extern "C" {
#endif

// The calling thread's group depth (ncclGroupStart minus ncclGroupEnd, never below 0).
int jax_mscclpp_nccl_group_depth(void);
// 1 when `comm` is a communicator this library made (it wraps the real library's), 0 otherwise.
int jax_mscclpp_nccl_is_ours(ncclComm_t comm);
// The real library's communicator behind `comm` (`comm` itself when it is not ours).
ncclComm_t jax_mscclpp_nccl_real_communicator(ncclComm_t comm);
// The path the real NCCL was opened from; "" before the first call that needed it, or when it could not be opened.
const char* jax_mscclpp_nccl_real_library(void);

#ifdef __cplusplus
}
#endif
