#include "registrations.h"

#include <mutex>
#include <new>
#include <unordered_set>

namespace jax_mscclpp::nccl {
namespace {

// Every live range of this process. Lookups happen once per call that takes a handle; a process holds a few ranges.
struct Registry {
  std::mutex lock;
  std::unordered_set<const void*> live;
};

Registry& registry() {
  static Registry* const instance = new Registry;  // never destroyed: entry points may run during exit
  return *instance;
}

}  // namespace

RegisteredRange* make_registered_range(void* buffer, size_t bytes, int nranks, void* real) {
  auto* range = new (std::nothrow) RegisteredRange{buffer, bytes, nranks, real, nullptr};
  if (range == nullptr) return nullptr;
  Registry& r = registry();
  try {
    std::lock_guard<std::mutex> hold(r.lock);
    r.live.insert(range);
  } catch (const std::bad_alloc&) {
    delete range;
    return nullptr;
  }
  return range;
}

RegisteredRange* registered_range(const void* handle) {
  if (handle == nullptr) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> hold(r.lock);
  return r.live.count(handle) != 0 ? static_cast<RegisteredRange*>(const_cast<void*>(handle)) : nullptr;
}

void release_registered_range(RegisteredRange* range) {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> hold(r.lock);
    r.live.erase(range);
  }
  delete range;
}

}  // namespace jax_mscclpp::nccl
