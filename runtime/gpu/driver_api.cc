#include "driver_api.h"

#include <cuda_runtime.h>

namespace jax_mscclpp::cuda {
namespace {

template <class Fn>
void lookup(const char* symbol, Fn& out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) == cudaSuccess &&
      status == cudaDriverEntryPointSuccess) {
    out = reinterpret_cast<Fn>(fn);
  } else {
    (void)cudaGetLastError();
  }
}

DriverApi load() {
  DriverApi api;
  lookup("cuGetErrorString", api.get_error_string);
  lookup("cuStreamWriteValue64", api.stream_write_value64);
  lookup("cuMemGetAddressRange", api.mem_get_address_range);
  lookup("cuPointerGetAttributes", api.pointer_get_attributes);
  lookup("cuMemRetainAllocationHandle", api.mem_retain_allocation_handle);
  lookup("cuMemExportToShareableHandle", api.mem_export_to_shareable_handle);
  lookup("cuMemImportFromShareableHandle", api.mem_import_from_shareable_handle);
  lookup("cuMemGetAllocationGranularity", api.mem_get_allocation_granularity);
  lookup("cuMemCreate", api.mem_create);
  lookup("cuMemRelease", api.mem_release);
  lookup("cuMemAddressReserve", api.mem_address_reserve);
  lookup("cuMemAddressFree", api.mem_address_free);
  lookup("cuMemMap", api.mem_map);
  lookup("cuMemUnmap", api.mem_unmap);
  lookup("cuMemSetAccess", api.mem_set_access);
  lookup("cuMulticastGetGranularity", api.multicast_get_granularity);
  lookup("cuMulticastCreate", api.multicast_create);
  lookup("cuMulticastAddDevice", api.multicast_add_device);
  lookup("cuMulticastBindMem", api.multicast_bind_mem);
  lookup("cuMulticastUnbind", api.multicast_unbind);
  return api;
}

}  // namespace

const DriverApi& driver_api() {
  static const DriverApi api = load();
  return api;
}

const char* driver_error_string(CUresult r) {
  const char* s = nullptr;
  if (driver_api().get_error_string != nullptr) driver_api().get_error_string(r, &s);
  return s != nullptr ? s : "unknown driver error";
}

}  // namespace jax_mscclpp::cuda
