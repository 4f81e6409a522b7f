// our_runtime.h's estimate_group_microseconds: what ncclGroupSimulateEnd reports for a group our runtime would
// have run. A model, not a measurement: a launch latency per call and the bytes each call moves per rank at
// NVLink speed (an H200's, in bytes per microsecond).
#include "dtype_codes.h"
#include "our_runtime.h"

namespace jax_mscclpp::nccl {
namespace {

constexpr float kLaunchMicroseconds = 8.0f;
constexpr float kBytesPerMicrosecond = 150e3f;

}  // namespace

float estimate_group_microseconds(const std::vector<Operation>& operations) {
  float total = 0.0f;
  for (const Operation& op : operations)
    total += kLaunchMicroseconds + static_cast<float>(op.count * nccl_dtype_bytes(op.dtype)) / kBytesPerMicrosecond;
  return total;
}

}  // namespace jax_mscclpp::nccl
