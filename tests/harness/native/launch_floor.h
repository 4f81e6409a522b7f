// The least host work a call can take: an empty kernel launched on a stream, and beside it the same launch followed
// by the two CUDA calls the call entry's issue order makes after every call (runtime/gpu/issue_order.h:
// cudaStreamGetCaptureInfo, cudaEventRecord). What bench/kernels/host_time.py reads the call entries' host time
// against.
#pragma once

#include <vector>

namespace jax_mscclpp {

// Host microseconds per call, one value per round: `calls` launches of an empty one-thread kernel on a stream of
// `device`, timed without synchronizing (the stream is drained between rounds, so the launch queue never fills);
// with `issue_order_calls` each launch is followed by a capture query and an event record on the same stream.
std::vector<double> time_launch_floor(int device, int calls, int rounds, bool issue_order_calls);

}  // namespace jax_mscclpp
