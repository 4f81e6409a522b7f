// Buffers registered with a communicator of our runtime (ncclCommRegister) and windows of it
// (ncclCommWindowRegister). The handle is a RegisteredRange (or, for a window, the ncclWindow_t) of ours:
//   - a buffer registration records the range, local to the rank (our runtime's too, register_buffer): where a
//     call's input and output are registered on every rank (as NCCL requires where one rank's are), the call entry
//     runs the streaming calls in place on them (runtime/gpu/call.h), and the others through scratch;
//   - a window is also registered with our runtime, collectively (our_runtime.h, register_window): where every
//     rank registered it symmetric (NCCL_WIN_COLL_SYMMETRIC) and maps every other's window, the calls whose buffers
//     lie in windows run in place, without scratch (collective.h, launch_in_place); `window` is the runtime's
//     record.
// Where a real communicator runs beside ours, the buffer is registered with it too, and the real handle kept inside
// ours for the calls forwarded to it (forwarding.h unwraps windows as it unwraps communicators). A window of ours
// without a real one answers ncclWinGetUserPtr here; the device API's calls on it are ncclInvalidUsage naming the
// call.
//
// A handle is ours when this process's registry of live ranges holds it: it is never read to find out. NVIDIA's
// handles are opaque and need not be readable from the host (a window of NVIDIA's NCCL is an address in its
// device-side window pool), so any handle the registry does not hold passes to NVIDIA's library untouched.
#pragma once

#include <cstddef>

#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

struct RegisteredRange {
  void* buffer;
  size_t bytes;
  int nranks;    // the communicator's size (the device API's peer checks, entry_points_device_api.cc)
  void* real;    // the real communicator's handle (a registration handle, or an ncclWindow_t), or null
  void* window;  // a window's record in our runtime (register_window), or null
};

// A new range, entered into the registry; null when memory runs out.
RegisteredRange* make_registered_range(void* buffer, size_t bytes, int nranks, void* real);
// The range behind `handle`, or null when the registry does not hold it (null, NVIDIA's, or released). Thread-safe.
RegisteredRange* registered_range(const void* handle);
// Removes the range from the registry, then frees it.
void release_registered_range(RegisteredRange* range);

}  // namespace jax_mscclpp::nccl
