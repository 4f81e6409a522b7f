#include "dtype_codes.h"

#include "jax_mscclpp/codes.h"

namespace jax_mscclpp::nccl {

size_t nccl_dtype_bytes(ncclDataType_t dtype) {
  switch (dtype) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

int32_t reduction_dtype_code(ncclDataType_t dtype) {
  // The rows of codes.def with an NCCL type (nccl_type -1: none).
#define JAX_MSCCLPP_DTYPE(enumerator, code, name, bytes, host_type, device_type, nccl_type, xla_type) \
  if (int(dtype) == int(nccl_type)) return codes::enumerator;
#include "jax_mscclpp/codes.def"
  return -1;
}

int32_t reduce_op_code(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return codes::kSum;
    case ncclMax: return codes::kMax;
    case ncclMin: return codes::kMin;
    default: return -1;
  }
}

}  // namespace jax_mscclpp::nccl

namespace jax_mscclpp::nccl {

int32_t collective_code(ApiFunction function) {
  switch (function) {
    case ApiFunction::ncclAllReduce: return codes::kAllReduce;
    case ApiFunction::ncclAllGather: return codes::kAllGather;
    case ApiFunction::ncclReduceScatter: return codes::kReduceScatter;
    case ApiFunction::ncclAlltoAll: return codes::kAllToAll;
    default: return -1;
  }
}

std::optional<FoldElement> fold_element(ncclDataType_t dtype) {
  switch (dtype) {
    case ncclInt8: return FoldElement::kS8;
    case ncclUint8: return FoldElement::kU8;
    case ncclInt32: return FoldElement::kS32;
    case ncclUint32: return FoldElement::kU32;
    case ncclInt64: return FoldElement::kS64;
    case ncclUint64: return FoldElement::kU64;
    case ncclFloat16: return FoldElement::kF16;
    case ncclFloat32: return FoldElement::kF32;
    case ncclFloat64: return FoldElement::kF64;
    case ncclBfloat16: return FoldElement::kBF16;
    case ncclFloat8e4m3: return FoldElement::kF8E4M3;
    case ncclFloat8e5m2: return FoldElement::kF8E5M2;
    default: return std::nullopt;
  }
}

std::optional<FoldOp> fold_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return FoldOp::kSum;
    case ncclProd: return FoldOp::kProd;
    case ncclMax: return FoldOp::kMax;
    case ncclMin: return FoldOp::kMin;
    case ncclAvg: return FoldOp::kAvg;
    default: return std::nullopt;
  }
}

}  // namespace jax_mscclpp::nccl
