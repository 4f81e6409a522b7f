// our_runtime.h's ncclMemAlloc / ncclMemFree: device memory of the calling thread's current GPU, from the driver's
// virtual memory management where it is there (a physical allocation exportable as a POSIX file descriptor, mapped
// read-write for this device, granularity-rounded: what NVIDIA's ncclMemAlloc makes, so that NVIDIA's registration
// accepts it too), else cudaMalloc. The allocations are kept by address, so that ncclMemFree knows how to free.
#include <cuda.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>

#include "last_error.h"
#include "our_runtime.h"

namespace jax_mscclpp::nccl {
namespace {

struct DriverVmm {
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  bool complete() const {
    return granularity && create && release && reserve && address_free && map && unmap && set_access;
  }
};

template <class F>
void look_up(const char* name, F& slot) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    slot = reinterpret_cast<F>(p);
}

const DriverVmm& vmm() {
  static const DriverVmm api = [] {
    DriverVmm a;
    look_up("cuMemGetAllocationGranularity", a.granularity);
    look_up("cuMemCreate", a.create);
    look_up("cuMemRelease", a.release);
    look_up("cuMemAddressReserve", a.reserve);
    look_up("cuMemAddressFree", a.address_free);
    look_up("cuMemMap", a.map);
    look_up("cuMemUnmap", a.unmap);
    look_up("cuMemSetAccess", a.set_access);
    return a;
  }();
  return api;
}

struct Allocation {
  size_t bytes;                      // reserved (rounded) bytes; 0 for cudaMalloc
  CUmemGenericAllocationHandle handle;
};

std::mutex allocations_mutex;
std::map<void*, Allocation>& allocations() {
  static std::map<void*, Allocation> all;
  return all;
}

// A cuMem allocation of at least `size` bytes on `device`; false (nothing held) where the driver refuses.
bool allocate_vmm(int device, size_t size, void** ptr, Allocation* out) {
  const DriverVmm& api = vmm();
  if (!api.complete()) return false;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  if (api.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || granularity == 0)
    return false;
  const size_t bytes = (size + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle{};
  if (api.create(&handle, bytes, &prop, 0) != CUDA_SUCCESS) return false;
  CUdeviceptr address = 0;
  if (api.reserve(&address, bytes, granularity, 0, 0) != CUDA_SUCCESS) {
    api.release(handle);
    return false;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (api.map(address, bytes, 0, handle, 0) != CUDA_SUCCESS) {
    api.address_free(address, bytes);
    api.release(handle);
    return false;
  }
  if (api.set_access(address, bytes, &access, 1) != CUDA_SUCCESS) {
    api.unmap(address, bytes);
    api.address_free(address, bytes);
    api.release(handle);
    return false;
  }
  *ptr = reinterpret_cast<void*>(address);
  *out = {bytes, handle};
  return true;
}

}  // namespace

ncclResult_t allocate_buffer(void** ptr, size_t size) {
  if (ptr == nullptr) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  if (size == 0) return fail(ncclInvalidArgument, "ncclMemAlloc: size is 0");
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
    return fail(ncclUnhandledCudaError, std::string("ncclMemAlloc: cudaGetDevice: ") + cudaGetErrorString(e));
  Allocation made{0, {}};
  if (!allocate_vmm(device, size, ptr, &made)) {
    if (const cudaError_t e = cudaMalloc(ptr, size); e != cudaSuccess) {
      (void)cudaGetLastError();
      return fail(ncclUnhandledCudaError, "ncclMemAlloc of " + std::to_string(size) + " bytes: " +
                                              cudaGetErrorString(e));
    }
  }
  std::lock_guard<std::mutex> lock(allocations_mutex);
  allocations()[*ptr] = made;
  clear_last_error();
  return ncclSuccess;
}

bool owns_buffer(void* ptr) {
  std::lock_guard<std::mutex> lock(allocations_mutex);
  return allocations().count(ptr) != 0;
}

ncclResult_t free_buffer(void* ptr) {
  Allocation held{};
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    auto found = allocations().find(ptr);
    if (found == allocations().end())
      return fail(ncclInvalidArgument, "ncclMemFree: the pointer was not allocated by ncclMemAlloc");
    held = found->second;
    allocations().erase(found);
  }
  if (held.bytes == 0) {
    if (const cudaError_t e = cudaFree(ptr); e != cudaSuccess)
      return fail(ncclUnhandledCudaError, std::string("ncclMemFree: ") + cudaGetErrorString(e));
  } else {
    // As cudaFree does, the device finishes its work first (work queued before may still use the memory).
    const DriverVmm& api = vmm();
    const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(ptr);
    (void)cudaDeviceSynchronize();
    api.unmap(address, held.bytes);
    api.address_free(address, held.bytes);
    api.release(held.handle);
  }
  clear_last_error();
  return ncclSuccess;
}

}  // namespace jax_mscclpp::nccl
