// CUDA driver entry points, looked up at run time through the runtime (cudaGetDriverEntryPointByVersion), so
// the module links only the static CUDA runtime and still imports on a machine without a GPU or driver.
#pragma once

#include <cuda.h>

namespace jax_mscclpp::cuda {

struct DriverApi {
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuStreamWriteValue64) stream_write_value64 = nullptr;
  // The allocation a device address lies in (memory.h: a handle of a range inside one).
  decltype(&::cuMemGetAddressRange) mem_get_address_range = nullptr;
  // An address's allocation and its buffer id (allocation_exchange.h).
  decltype(&::cuPointerGetAttributes) pointer_get_attributes = nullptr;
  // cuMem allocations shared between processes through file descriptors (allocation_exchange.h).
  decltype(&::cuMemRetainAllocationHandle) mem_retain_allocation_handle = nullptr;
  decltype(&::cuMemExportToShareableHandle) mem_export_to_shareable_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) mem_import_from_shareable_handle = nullptr;
  // Virtual memory management (the opt-in NVLS path, nvls.h, and the NCCL-API library's ncclMemAlloc) and
  // multicast (the NVLS path only).
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMulticastGetGranularity) multicast_get_granularity = nullptr;
  decltype(&::cuMulticastCreate) multicast_create = nullptr;
  decltype(&::cuMulticastAddDevice) multicast_add_device = nullptr;
  decltype(&::cuMulticastBindMem) multicast_bind_mem = nullptr;
  decltype(&::cuMulticastUnbind) multicast_unbind = nullptr;
};

// Looked up once (thread-safe); entries the driver lacks stay null.
const DriverApi& driver_api();

// "CUDA_ERROR_..." text for a driver result.
const char* driver_error_string(CUresult r);

}  // namespace jax_mscclpp::cuda
