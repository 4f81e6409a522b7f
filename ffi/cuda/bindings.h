// Python bindings of the CUDA runtime of the JAX path: jax_mscclpp._jax_mscclpp.cuda.
#pragma once

#include <nanobind/nanobind.h>

namespace jax_mscclpp::cuda {
void register_bindings(nanobind::module_& m);
// Communicators of the JAX integration (communicator_bindings.cc).
void register_communicator_bindings(nanobind::module_& m);
}
