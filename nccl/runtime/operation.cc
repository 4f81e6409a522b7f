#include "operation.h"

#include <atomic>

#include "dtype_codes.h"
#include "jax_mscclpp/codes.h"

namespace jax_mscclpp::nccl {
namespace {

std::atomic<uint64_t> decoded{0};

}  // namespace

DecodedOperation decode_operation(const Operation& op) {
  decoded.fetch_add(1, std::memory_order_relaxed);
  DecodedOperation d{};
  d.element = nccl_dtype_bytes(op.dtype);
  d.block_bytes = static_cast<uint64_t>(op.count) * d.element;
  d.collective = collective_code(op.function);
  if (d.collective >= 0 && collective_reduces(d.collective)) {
    d.dtype = reduction_dtype_code(op.dtype);
    d.op = reduce_op_code(op.op);
    d.block_count = op.count;
  } else {
    d.dtype = codes::kU8;
    d.op = codes::kSum;
    d.block_count = d.block_bytes;
  }
  return d;
}

uint64_t operations_decoded() { return decoded.load(std::memory_order_relaxed); }

}  // namespace jax_mscclpp::nccl
