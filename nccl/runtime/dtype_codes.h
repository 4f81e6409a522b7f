// NCCL's data types and reductions as our kernels' codes (jax_mscclpp/codes.def).
#pragma once

#include <cstddef>
#include <cstdint>

#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

// Bytes per element of an NCCL data type; 0 for one NCCL does not define.
size_t nccl_dtype_bytes(ncclDataType_t dtype);
// Our dtype code for a reduction of `dtype`, -1 when our kernels do not reduce it (the 8-bit floats).
int32_t reduction_dtype_code(ncclDataType_t dtype);
// Our reduce-op code (sum, max, min), -1 for the others (prod, avg, pre-multiplied sums).
int32_t reduce_op_code(ncclRedOp_t op);

}  // namespace jax_mscclpp::nccl
