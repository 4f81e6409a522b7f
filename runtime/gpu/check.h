// CUDA error checking for the host runtime: failures become exceptions that name the call and the error.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace jax_mscclpp::cuda {

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line) {
  throw CudaError(e, std::string("jax_mscclpp: ") + expr + " failed: " + cudaGetErrorName(e) + " (" +
                         cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace jax_mscclpp::cuda

#define JAX_MSCCLPP_CUDA_CHECK(expr)                                                         \
  do {                                                                                       \
    cudaError_t jax_mscclpp_err_ = (expr);                                                   \
    if (jax_mscclpp_err_ != cudaSuccess)                                                     \
      ::jax_mscclpp::cuda::throw_cuda_error(jax_mscclpp_err_, #expr, __FILE__, __LINE__);    \
  } while (0)

// For destructors: a failure (typically a context already poisoned by a trap) is ignored, and the
// non-sticky last-error state it left is cleared so it does not surface in an unrelated later check.
#define JAX_MSCCLPP_CUDA_IGNORE(expr) \
  do {                                \
    (void)(expr);                     \
    (void)cudaGetLastError();         \
  } while (0)

namespace jax_mscclpp::cuda {

// Makes `device` current for the guard's lifetime (host runtime calls act on the current device), its primary
// context current on the calling thread too, so that driver calls made under the guard find it: cudaSetDevice even
// where `device` is already the thread's device (a thread that never made a runtime call has the device but no
// current context, and cuMemGetAddressRange there fails).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    JAX_MSCCLPP_CUDA_CHECK(cudaGetDevice(&previous_));
    JAX_MSCCLPP_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(previous_)); }

 private:
  int previous_ = 0;
};

}  // namespace jax_mscclpp::cuda
