// Python bindings of the CUDA runtime and the virtual-ranks harness: jax_mscclpp._jax_mscclpp.cuda.
#pragma once

#include <nanobind/nanobind.h>

namespace jax_mscclpp::cuda {
void register_bindings(nanobind::module_& m);
}
