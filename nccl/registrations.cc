#include "registrations.h"

#include <new>

namespace jax_mscclpp::nccl {

RegisteredRange* make_registered_range(void* buffer, size_t bytes, void* real, void* window) {
  auto* range = new (std::nothrow) RegisteredRange{kRegisteredRangeMagic, nullptr, buffer, bytes, real, window};
  if (range != nullptr) range->self = range;
  return range;
}

RegisteredRange* registered_range(const void* handle) {
  if (handle == nullptr) return nullptr;
  auto* candidate = static_cast<RegisteredRange*>(const_cast<void*>(handle));
  if (candidate->magic != kRegisteredRangeMagic || candidate->self != candidate) return nullptr;
  return candidate;
}

void release_registered_range(RegisteredRange* range) {
  range->magic = 0;
  range->self = nullptr;
  delete range;
}

}  // namespace jax_mscclpp::nccl
