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
