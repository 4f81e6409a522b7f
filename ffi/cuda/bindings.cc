#include "bindings.h"

#include <cuda_runtime.h>
#include <nanobind/stl/pair.h>

#include "check.h"
#include "memory.h"
#include "proxy.h"

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
  // What a resource-leak check reads (jax_mscclpp.tools.soak.churn): device memory, and what the runtime holds open.
  m.def(
      "mem_get_info",
      [](int device) {
        DeviceGuard guard(device);
        size_t free_b = 0, total = 0;
        JAX_MSCCLPP_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
        return std::make_pair(free_b, total);
      },
      nb::arg("device"), "(free, total) bytes of `device`.");
  m.def("live_ipc_mappings", &live_ipc_mappings, "CUDA IPC mappings opened by this module and not yet closed.");
  m.def("live_proxy_threads", &ProxyService::live_threads, "Proxy threads of this module running in this process.");
  register_communicator_bindings(m);
}

}  // namespace jax_mscclpp::cuda
