// The real NCCL this library forwards to.
//
// It is opened at the first call that needs it, once per process, by absolute path with RTLD_LOCAL | RTLD_DEEPBIND
// (NVIDIA's library calls some of its own exports: bound to itself, they never come back here), from the first of:
//   1. JAX_MSCCLPP_REAL_NCCL, which must be an absolute path;
//   2. the nvidia-nccl wheel next to this library: <site-packages>/nvidia/nccl/lib/libnccl.so.2 when this library
//      is <site-packages>/jax_mscclpp/lib/libnccl.so.2.
// A path that is this library itself is refused. When none opens, every call that needs the real library returns
// ncclSystemError with a last error saying where it looked and how to point at one.
// Functions are looked up in it on their first use; one it lacks is ncclSystemError with a last error naming it.
#pragma once

#include <string>

#include "api_function.h"
#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

// The real library's `function`, or nullptr (then this thread's last error says why).
void* real_function(ApiFunction function);

// The same, leaving this thread's last error as it was when the function is missing.
void* real_function_if_present(ApiFunction function);

template <typename Function>
Function real(ApiFunction function) {
  return reinterpret_cast<Function>(real_function(function));
}

template <typename Function>
Function real_if_present(ApiFunction function) {
  return reinterpret_cast<Function>(real_function_if_present(function));
}

// Opens the real library now (once per process, as the first call needing it would); ncclSystemError, with this
// thread's last error saying why, when it cannot be opened.
ncclResult_t open_real_library();

// The path the real library was opened from; "" while it has not been opened or could not be.
const char* real_library_path();

}  // namespace jax_mscclpp::nccl
