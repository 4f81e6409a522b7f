#include "memory.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <utility>

#include "check.h"
#include "driver_api.h"
#include "gpu_identity.h"

namespace jax_mscclpp::cuda {
namespace {

constexpr uint32_t kMagic = 0x4A4D4D48;  // "JMMH"
constexpr uint32_t kVersion = 3;
std::atomic<int> g_ipc_mappings{0};


}  // namespace

uint64_t host_identity() {
  static const uint64_t id = [] {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(f, s);
    if (s.empty()) s = std::to_string(gethostid());
    return static_cast<uint64_t>(std::hash<std::string>{}(s));
  }();
  return id;
}

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : bytes_(bytes), device_(device) {
  DeviceGuard g(device);
  JAX_MSCCLPP_CUDA_CHECK(cudaMalloc(&ptr_, bytes == 0 ? 16 : bytes));
  // The memset runs on the legacy stream, which does not order work on non-blocking streams: wait for it.
  cudaError_t e = cudaMemset(ptr_, 0, bytes == 0 ? 16 : bytes);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamLegacy);
  if (e != cudaSuccess) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    JAX_MSCCLPP_CUDA_CHECK(e);
  }
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), device_(o.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (ptr_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
}

MemoryHandle MemoryHandle::make(const void* ptr, size_t bytes, int device, bool local_only) {
  MemoryHandle h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kMagic;
  h.version = kVersion;
  h.process = this_process_identity();
  h.host_id = host_identity();
  h.device = device;
  h.address = reinterpret_cast<uint64_t>(ptr);
  h.bytes = bytes;
  DeviceGuard g(device);
  CUdeviceptr base = h.address;
  if (const DriverApi& api = driver_api(); api.mem_get_address_range != nullptr) {
    // The handle names the allocation, so a peer adds `offset` to its base: a range whose allocation is unknown
    // cannot be exported (an offset of 0 would place it at the allocation's start).
    size_t allocation = 0;
    if (const CUresult r = api.mem_get_address_range(&base, &allocation, static_cast<CUdeviceptr>(h.address));
        r != CUDA_SUCCESS) {
      if (local_only) return h;
      throw std::runtime_error(std::string("jax_mscclpp: cuMemGetAddressRange failed: ") + driver_error_string(r));
    }
  }
  h.offset = h.address - static_cast<uint64_t>(base);
  const cudaError_t exported = cudaIpcGetMemHandle(&h.ipc, reinterpret_cast<void*>(base));
  if (exported != cudaSuccess && local_only) {
    (void)cudaGetLastError();
    return h;
  }
  JAX_MSCCLPP_CUDA_CHECK(exported);
  h.exported = 1;
  return h;
}

std::string MemoryHandle::serialize() const { return std::string(reinterpret_cast<const char*>(this), sizeof(*this)); }

MemoryHandle MemoryHandle::deserialize(const std::string& bytes) {
  MemoryHandle h;
  if (bytes.size() != sizeof(h)) throw std::invalid_argument("jax_mscclpp: memory handle has the wrong size");
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kMagic || h.version != kVersion)
    throw std::invalid_argument("jax_mscclpp: not a jax_mscclpp memory handle (or another version)");
  return h;
}

bool MemoryHandle::same_process() const {
  return process == this_process_identity() && host_id == host_identity();
}

MappedMemory::MappedMemory(const MemoryHandle& h, int local_device) : bytes_(h.bytes), device_(local_device) {
  if (h.same_process()) {
    if (h.device != local_device) {
      int can = 0;
      JAX_MSCCLPP_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, local_device, h.device));
      if (!can)
        throw std::runtime_error("jax_mscclpp: device " + std::to_string(local_device) + " cannot access device " +
                                 std::to_string(h.device) + " (no peer access)");
      DeviceGuard g(local_device);
      cudaError_t e = cudaDeviceEnablePeerAccess(h.device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else {
        JAX_MSCCLPP_CUDA_CHECK(e);
      }
    }
    ptr_ = reinterpret_cast<void*>(h.address);
    ipc_ = false;
    return;
  }
  if (!h.exported)
    throw std::runtime_error("jax_mscclpp: memory of another process that CUDA IPC does not export (cuMem's) cannot "
                             "be mapped in this one");
  DeviceGuard g(local_device);
  JAX_MSCCLPP_CUDA_CHECK(cudaIpcOpenMemHandle(&ipc_base_, h.ipc, cudaIpcMemLazyEnablePeerAccess));
  ptr_ = static_cast<char*>(ipc_base_) + h.offset;
  ipc_ = true;
  g_ipc_mappings.fetch_add(1);
}

MappedMemory::~MappedMemory() { reset(); }

MappedMemory::MappedMemory(MappedMemory&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)),
      ipc_base_(std::exchange(o.ipc_base_, nullptr)),
      bytes_(o.bytes_),
      device_(o.device_),
      ipc_(std::exchange(o.ipc_, false)) {}

MappedMemory& MappedMemory::operator=(MappedMemory&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    ipc_base_ = std::exchange(o.ipc_base_, nullptr);
    bytes_ = o.bytes_;
    device_ = o.device_;
    ipc_ = std::exchange(o.ipc_, false);
  }
  return *this;
}

void MappedMemory::reset() {
  if (ptr_ != nullptr && ipc_) {
    int previous = 0;
    JAX_MSCCLPP_CUDA_IGNORE(cudaGetDevice(&previous));
    JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(device_));
    JAX_MSCCLPP_CUDA_IGNORE(cudaIpcCloseMemHandle(ipc_base_));
    JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(previous));
    g_ipc_mappings.fetch_sub(1);
  }
  ptr_ = nullptr;
  ipc_base_ = nullptr;
  ipc_ = false;
}

int live_ipc_mappings() { return g_ipc_mappings.load(); }

}  // namespace jax_mscclpp::cuda
