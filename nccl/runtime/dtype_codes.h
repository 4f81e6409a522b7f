// NCCL's operations, data types and reductions as our kernels' codes (jax_mscclpp/codes.def) and as the element
// types and operations of the fold that composed reductions run (kernels/collectives/fold.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "api_function.h"
#include "collectives/fold.h"
#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

// Bytes per element of an NCCL data type; 0 for one NCCL does not define.
size_t nccl_dtype_bytes(ncclDataType_t dtype);
// Our dtype code for a reduction of `dtype`, -1 when our kernels do not reduce it (the 8-bit floats).
int32_t reduction_dtype_code(ncclDataType_t dtype);
// Our reduce-op code (sum, max, min), -1 for the others (prod, avg, pre-multiplied sums).
int32_t reduce_op_code(ncclRedOp_t op);
// The collective (codes.def) a collective kernel runs an NCCL function with; -1 for every other function.
int32_t collective_code(ApiFunction function);
// The fold's element type for `dtype`; nothing for a type NCCL does not define.
std::optional<FoldElement> fold_element(ncclDataType_t dtype);
// The fold's operation for a built-in reduction (ncclSum .. ncclAvg); nothing for the others.
std::optional<FoldOp> fold_op(ncclRedOp_t op);

}  // namespace jax_mscclpp::nccl
