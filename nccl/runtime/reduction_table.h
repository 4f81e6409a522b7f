// The reductions ncclRedOpCreatePreMulSum makes on a communicator of ours that NVIDIA's NCCL does not serve: each a
// factor of one data type, held as its bytes (ncclScalarHostImmediate: read at creation) or as a device address
// (ncclScalarDevice: read by every kernel that uses it, so it may change between calls).
//
// Handles are NCCL's encoding: ncclNumOps + the slot's index; a destroyed slot is reused. Used by one thread at a
// time (a communicator's rule).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

struct PreMulSum {
  ncclDataType_t dtype;
  const void* device;  // ncclScalarDevice: the factor's address; null otherwise
  uint64_t bits;       // ncclScalarHostImmediate: the factor's bytes (low bytes)
};

class ReductionTable {
 public:
  ncclRedOp_t add(const PreMulSum& reduction);
  // False when `op` is not a live reduction of this table.
  bool remove(ncclRedOp_t op);
  std::optional<PreMulSum> find(ncclRedOp_t op) const;

 private:
  std::vector<std::optional<PreMulSum>> slots_;
};

}  // namespace jax_mscclpp::nccl
