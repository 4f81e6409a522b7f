// Python bindings of the CUDA runtime and the virtual-ranks harness: jax_mscclpp._jax_mscclpp.cuda.
#pragma once

#include <nanobind/nanobind.h>

namespace jax_mscclpp::cuda {
void register_bindings(nanobind::module_& m);
// Communicators of the JAX integration (communicator_bindings.cc).
void register_communicator_bindings(nanobind::module_& m);
// The plan executor and its virtual-ranks entry points (executor_bindings.cc).
void register_executor_bindings(nanobind::module_& m);
}
