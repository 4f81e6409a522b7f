#include "reduction_table.h"

namespace jax_mscclpp::nccl {

ncclRedOp_t ReductionTable::add(const PreMulSum& reduction) {
  size_t slot = 0;
  while (slot < slots_.size() && slots_[slot].has_value()) ++slot;
  if (slot == slots_.size()) slots_.emplace_back();
  slots_[slot] = reduction;
  return static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(slot));
}

bool ReductionTable::remove(ncclRedOp_t op) {
  const int slot = static_cast<int>(op) - ncclNumOps;
  if (slot < 0 || slot >= static_cast<int>(slots_.size()) || !slots_[slot].has_value()) return false;
  slots_[slot].reset();
  return true;
}

std::optional<PreMulSum> ReductionTable::find(ncclRedOp_t op) const {
  const int slot = static_cast<int>(op) - ncclNumOps;
  if (slot < 0 || slot >= static_cast<int>(slots_.size())) return std::nullopt;
  return slots_[slot];
}

}  // namespace jax_mscclpp::nccl
