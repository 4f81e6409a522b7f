// Registered memory: device allocations other ranks may map, and the mappings of other ranks' allocations.
//
// Transports, chosen when a peer's handle is imported:
//   same process      : the owner's pointer is used directly (same device), after enabling peer access when
//                       the devices differ;
//   another process   : the CUDA IPC handle is opened (cudaIpcOpenMemHandle) and closed when the mapping
//                       is destroyed.
// A handle travels as bytes (`MemoryHandle::serialize`), so any channel can carry it: a pipe or file in the
// tests, JAX's coordination service in the package.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace jax_mscclpp::cuda {

// cudaMalloc'd memory owned by this process, zero-initialized. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class T = char>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void reset();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

// What a peer needs to map `bytes` of device memory at `address` (fixed-size, plain bytes): the whole of a
// cudaMalloc allocation (the scratch), or a range inside one (a window of the NCCL library), whose allocation the
// IPC handle names and `offset` places the range in.
struct MemoryHandle {
  uint32_t magic;
  uint32_t version;
  int64_t process;  // the owner's this_process_identity()
  uint64_t host_id;
  int32_t device;
  int32_t exported;  // 1: `ipc` names the allocation (a process other than the owner can map it)
  uint64_t address;  // in the owner's process
  uint64_t bytes;
  uint64_t offset;   // of `address` in its allocation
  cudaIpcMemHandle_t ipc;

  // Where CUDA IPC cannot export the memory (not cudaMalloc's: cuMem allocations are exported by file descriptors,
  // which this handle does not carry), throws std::runtime_error, or with `local_only` makes a handle that only
  // the owner's process can map.
  static MemoryHandle make(const void* ptr, size_t bytes, int device, bool local_only = false);
  std::string serialize() const;
  static MemoryHandle deserialize(const std::string& bytes);  // throws std::invalid_argument
  bool same_process() const;
};

// A peer's allocation mapped into this process. Move-only; unmapped on destruction.
class MappedMemory {
 public:
  MappedMemory() = default;
  MappedMemory(const MemoryHandle& handle, int local_device);
  ~MappedMemory();
  MappedMemory(MappedMemory&& o) noexcept;
  MappedMemory& operator=(MappedMemory&& o) noexcept;
  MappedMemory(const MappedMemory&) = delete;
  MappedMemory& operator=(const MappedMemory&) = delete;

  char* get() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }
  // The owner is this process: its device addresses, not only this allocation's, are valid here.
  bool in_this_process() const { return ptr_ != nullptr && !ipc_; }

 private:
  void reset();
  void* ptr_ = nullptr;
  void* ipc_base_ = nullptr;  // what cudaIpcOpenMemHandle returned (ptr_ less the handle's offset)
  size_t bytes_ = 0;
  int device_ = -1;
  bool ipc_ = false;
};

// Mappings opened through cudaIpcOpenMemHandle and not yet closed (teardown checks).
int live_ipc_mappings();

// Identifies this machine boot (same-process detection beside the process identity, gpu_identity.h).
uint64_t host_identity();

}  // namespace jax_mscclpp::cuda
