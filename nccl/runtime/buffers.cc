// our_runtime.h's ncclMemAlloc / ncclMemFree: device memory of the calling thread's current GPU, from the driver's
// virtual memory management where it is there (a physical allocation exportable as a POSIX file descriptor, mapped
// read-write for this device and for every other device of the process that can access it as a peer
// (cudaDeviceCanAccessPeer), granularity-rounded: what NVIDIA's ncclMemAlloc makes, so that NVIDIA's registration
// accepts it too and ranks of this process on other GPUs may read and write it through its own address), else
// cudaMalloc. The allocations are kept by address, so that ncclMemFree knows how to free.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "driver_api.h"
#include "last_error.h"
#include "our_runtime.h"

namespace jax_mscclpp::nccl {
namespace {

using cuda::DriverApi;

// Whether the driver has every virtual-memory entry point an allocation needs.
bool has_vmm(const DriverApi& api) {
  return api.mem_get_allocation_granularity && api.mem_create && api.mem_release && api.mem_address_reserve &&
         api.mem_address_free && api.mem_map && api.mem_unmap && api.mem_set_access;
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

// Read-write access for `device` and every device of the process that can access its memory as a peer.
std::vector<CUmemAccessDesc> read_write_access(int device) {
  std::vector<CUmemAccessDesc> access;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) (void)cudaGetLastError();
  devices = std::max(devices, device + 1);
  for (int d = 0; d < devices; ++d) {
    int peer = 0;
    if (d != device && (cudaDeviceCanAccessPeer(&peer, d, device) != cudaSuccess || peer == 0)) {
      (void)cudaGetLastError();
      continue;
    }
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = d;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(desc);
  }
  return access;
}

// A cuMem allocation of at least `size` bytes on `device`; false (nothing held) where the driver refuses.
bool allocate_vmm(int device, size_t size, void** ptr, Allocation* out) {
  const DriverApi& api = cuda::driver_api();
  if (!has_vmm(api)) return false;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  if (api.mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || granularity == 0)
    return false;
  const size_t bytes = (size + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle{};
  if (api.mem_create(&handle, bytes, &prop, 0) != CUDA_SUCCESS) return false;
  CUdeviceptr address = 0;
  if (api.mem_address_reserve(&address, bytes, granularity, 0, 0) != CUDA_SUCCESS) {
    api.mem_release(handle);
    return false;
  }
  if (api.mem_map(address, bytes, 0, handle, 0) != CUDA_SUCCESS) {
    api.mem_address_free(address, bytes);
    api.mem_release(handle);
    return false;
  }
  const std::vector<CUmemAccessDesc> access = read_write_access(device);
  if (api.mem_set_access(address, bytes, access.data(), access.size()) != CUDA_SUCCESS) {
    api.mem_unmap(address, bytes);
    api.mem_address_free(address, bytes);
    api.mem_release(handle);
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
    const DriverApi& api = cuda::driver_api();
    const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(ptr);
    (void)cudaDeviceSynchronize();
    api.mem_unmap(address, held.bytes);
    api.mem_address_free(address, held.bytes);
    api.mem_release(held.handle);
  }
  clear_last_error();
  return ncclSuccess;
}

}  // namespace jax_mscclpp::nccl
