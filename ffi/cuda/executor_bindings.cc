#include "bindings.h"

namespace jax_mscclpp::cuda {

void register_executor_bindings(nanobind::module_& m) { (void)m; }

}  // namespace jax_mscclpp::cuda
