// The hardware SwitchChannel backend: NVLink multicast (NVLS) objects.
//
// SAFETY: on shared multi-GPU machines NVLink multicast can put GPUs out of service; such machines set
// NCCL_NVLS_ENABLE=0. The hardware path is therefore opt-in (JAX_MSCCLPP_NVLS=1) and refused whenever
// NCCL_NVLS_ENABLE=0, and the policy is checked before any driver call is made. Everything else uses the
// emulated backend (RankContext::switch_channel_emulated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace jax_mscclpp::cuda {

struct NvlsPolicy {
  bool allowed;
  std::string reason;
};

// Pure decision from the two variables' values (null when unset).
NvlsPolicy nvls_policy(const char* jax_mscclpp_nvls, const char* nccl_nvls_enable);
// The same, from this process's environment at the time of the call.
NvlsPolicy nvls_policy_from_env();

// Whether multimem.ld_reduce has (dtype, op) (codes of kernels/include/jax_mscclpp/reduce.cuh).
bool multimem_supported(int32_t dtype, int32_t op);

// A buffer of `bytes` on each of `devices` (one process), bound to one multicast object, with a unicast and
// a multicast mapping on each device. Throws std::runtime_error, before touching the driver, unless
// nvls_policy_from_env() allows it.
class MulticastBuffer {
 public:
  MulticastBuffer(const std::vector<int>& devices, size_t bytes);
  ~MulticastBuffer();
  MulticastBuffer(const MulticastBuffer&) = delete;
  MulticastBuffer& operator=(const MulticastBuffer&) = delete;

  size_t bytes() const { return size_; }
  char* unicast(int i) const { return reinterpret_cast<char*>(unicast_[i]); }
  char* multicast(int i) const { return reinterpret_cast<char*>(multicast_[i]); }

 private:
  void release();
  std::vector<int> devices_;
  size_t size_ = 0;
  unsigned long long mc_handle_ = 0;
  std::vector<unsigned long long> mem_handles_;
  std::vector<unsigned long long> unicast_;
  std::vector<unsigned long long> multicast_;
  std::vector<bool> bound_;
};

}  // namespace jax_mscclpp::cuda
