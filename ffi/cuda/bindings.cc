#include "bindings.h"

#include <cuda_runtime.h>

namespace nb = nanobind;

namespace jax_mscclpp::cuda {

void register_bindings(nb::module_& m) {
  m.def(
      "device_count",
      [] {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
          (void)cudaGetLastError();
          return 0;
        }
        return n;
      },
      "CUDA devices this process sees (0 without a driver or GPU).");
  register_communicator_bindings(m);
}

}  // namespace jax_mscclpp::cuda
