// A launch gate for timing queued device work without host gaps (the harness's timing runner, executor_rank.cc; a
// harness kernel, so the testing build's only): a one-thread kernel that holds its stream until the host sets a flag
// in mapped host memory. Work queued behind gates on several streams starts together
// once the flag is set. The wait is bounded (`limit_ns`): on expiry the kernel sets *expired and returns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace jax_mscclpp {

cudaError_t launch_gate(const volatile uint32_t* flag, uint32_t* expired, uint64_t limit_ns, cudaStream_t stream);

}  // namespace jax_mscclpp
