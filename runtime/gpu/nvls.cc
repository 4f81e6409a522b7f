#include "nvls.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "driver_api.h"
#include "jax_mscclpp/settings.h"
#include "jax_mscclpp/reduce.cuh"

namespace jax_mscclpp::cuda {

NvlsPolicy nvls_policy(const char* nvls, const char* nccl_nvls_enable) {
  if (nccl_nvls_enable != nullptr && std::strcmp(nccl_nvls_enable, "0") == 0)
    return {false, "NVLink multicast is disabled on this machine (NCCL_NVLS_ENABLE=0): using the emulated "
                   "SwitchChannel"};
  if (nvls == nullptr || std::strcmp(nvls, "1") != 0)
    return {false, "the hardware SwitchChannel is opt-in (JAX_MSCCLPP_NVLS=1): using the emulated SwitchChannel"};
  return {true, "JAX_MSCCLPP_NVLS=1"};
}

NvlsPolicy nvls_policy_from_env() {
  return nvls_policy(setting_value(Setting::kNvls), std::getenv("NCCL_NVLS_ENABLE"));
}

bool multimem_supported(int32_t dtype, int32_t op) {
  using namespace codes;
  switch (dtype) {
    case kF32:
    case kF64: return op == kSum;
    case kF16:
    case kBF16:
    case kS32:
    case kU32:
    case kS64:
    case kU64: return op == kSum || op == kMax || op == kMin;
    default: return false;
  }
}

namespace {

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(std::string("jax_mscclpp: ") + what + ": " + driver_error_string(r));
}

}  // namespace

MulticastBuffer::MulticastBuffer(const std::vector<int>& devices, size_t bytes) : devices_(devices) {
  const NvlsPolicy policy = nvls_policy_from_env();
  if (!policy.allowed) throw std::runtime_error("jax_mscclpp: hardware SwitchChannel refused: " + policy.reason);
  const DriverApi& api = driver_api();
  if (api.multicast_create == nullptr || api.multicast_add_device == nullptr || api.multicast_bind_mem == nullptr ||
      api.mem_create == nullptr || api.mem_map == nullptr || api.mem_address_reserve == nullptr ||
      api.mem_set_access == nullptr || api.multicast_get_granularity == nullptr)
    throw std::runtime_error("jax_mscclpp: the CUDA driver has no multicast support");
  const size_t n = devices.size();
  try {
    CUmulticastObjectProp prop;
    std::memset(&prop, 0, sizeof(prop));
    prop.numDevices = static_cast<unsigned int>(n);
    prop.size = bytes;
    prop.handleTypes = CU_MEM_HANDLE_TYPE_NONE;  // one process: nothing to export
    size_t gran = 0;
    check(api.multicast_get_granularity(&gran, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED), "multicast granularity");
    size_ = (bytes + gran - 1) / gran * gran;
    prop.size = size_;
    CUmemGenericAllocationHandle mc;
    check(api.multicast_create(&mc, &prop), "cuMulticastCreate");
    mc_handle_ = mc;
    for (int d : devices) check(api.multicast_add_device(mc, static_cast<CUdevice>(d)), "cuMulticastAddDevice");
    mem_handles_.assign(n, 0);
    unicast_.assign(n, 0);
    multicast_.assign(n, 0);
    bound_.assign(n, false);
    for (size_t i = 0; i < n; ++i) {
      CUmemAllocationProp p;
      std::memset(&p, 0, sizeof(p));
      p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      p.location.id = devices[i];
      CUmemGenericAllocationHandle h;
      check(api.mem_create(&h, size_, &p, 0), "cuMemCreate");
      mem_handles_[i] = h;
      check(api.multicast_bind_mem(mc, 0, h, 0, size_, 0), "cuMulticastBindMem");
      bound_[i] = true;
      CUmemAccessDesc access;
      std::memset(&access, 0, sizeof(access));
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = devices[i];
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      CUdeviceptr uc = 0, mcp = 0;
      check(api.mem_address_reserve(&uc, size_, gran, 0, 0), "cuMemAddressReserve");
      unicast_[i] = uc;
      check(api.mem_map(uc, size_, 0, h, 0), "cuMemMap");
      check(api.mem_set_access(uc, size_, &access, 1), "cuMemSetAccess");
      check(api.mem_address_reserve(&mcp, size_, gran, 0, 0), "cuMemAddressReserve");
      multicast_[i] = mcp;
      check(api.mem_map(mcp, size_, 0, mc, 0), "cuMemMap (multicast)");
      check(api.mem_set_access(mcp, size_, &access, 1), "cuMemSetAccess (multicast)");
    }
  } catch (...) {
    release();
    throw;
  }
}

MulticastBuffer::~MulticastBuffer() { release(); }

void MulticastBuffer::release() {
  const DriverApi& api = driver_api();
  for (size_t i = 0; i < multicast_.size(); ++i) {
    if (multicast_[i] != 0) {
      api.mem_unmap(multicast_[i], size_);
      api.mem_address_free(multicast_[i], size_);
    }
    if (unicast_[i] != 0) {
      api.mem_unmap(unicast_[i], size_);
      api.mem_address_free(unicast_[i], size_);
    }
    if (bound_[i]) api.multicast_unbind(mc_handle_, static_cast<CUdevice>(devices_[i]), 0, size_);
    if (mem_handles_[i] != 0) api.mem_release(mem_handles_[i]);
  }
  if (mc_handle_ != 0) api.mem_release(mc_handle_);
  multicast_.clear();
  unicast_.clear();
  mem_handles_.clear();
  bound_.clear();
  mc_handle_ = 0;
}

}  // namespace jax_mscclpp::cuda
