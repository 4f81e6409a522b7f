// Buffers registered with a communicator of our runtime (ncclCommRegister) and windows of it
// (ncclCommWindowRegister). The handle is a RegisteredRange (or, for a window, the ncclWindow_t) of ours:
//   - a buffer registration records the range only (it is local to the rank, and our kernels copy its calls
//     through their scratch);
//   - a window is also registered with our runtime, collectively (our_runtime.h, register_window): where every
//     rank maps every other's window, the calls whose buffers lie in windows run in place, without scratch
//     (collective.h, launch_in_place); `window` is the runtime's record.
// Where a real communicator runs beside ours, the buffer is registered with it too, and the real handle kept inside
// ours for the calls forwarded to it (forwarding.h unwraps windows as it unwraps communicators). A window of ours
// without a real one answers ncclWinGetUserPtr here; the device API's calls on it are ncclInvalidUsage naming the
// call.
//
// Handles are ours when they begin with kRegisteredRangeMagic and their own address, as communicators
// (our_communicator.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

constexpr std::uint64_t kRegisteredRangeMagic = 0x4745'5252'4353'4D4AULL;  // bytes "JMSCRREG" in memory order

struct RegisteredRange {
  std::uint64_t magic;
  const RegisteredRange* self;
  void* buffer;
  size_t bytes;
  void* real;    // the real communicator's handle (a registration handle, or an ncclWindow_t), or null
  void* window;  // a window's record in our runtime (register_window), or null
};

RegisteredRange* make_registered_range(void* buffer, size_t bytes, void* real, void* window = nullptr);
// The range behind `handle`, or null when it is not ours.
RegisteredRange* registered_range(const void* handle);
void release_registered_range(RegisteredRange* range);

}  // namespace jax_mscclpp::nccl
