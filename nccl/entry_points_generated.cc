// The FORWARD rows of api_functions.def, and their p<name> aliases (forwarding.h).
#include "forwarding.h"

using namespace jax_mscclpp::nccl;

#define JAX_MSCCLPP_NCCL_DEFINE_FORWARD(return_type, name, parameters, arguments)                  \
  extern "C" __attribute__((visibility("default"))) return_type name parameters {                  \
    return forward_to_real<decltype(&name)>(ApiFunction::name JAX_MSCCLPP_NCCL_COMMA_ARGS arguments); \
  }                                                                                                \
  JAX_MSCCLPP_NCCL_ALIAS(return_type, name, parameters)

#define JAX_MSCCLPP_NCCL_DEFINE_OPERATION(return_type, name, parameters, arguments)
#define JAX_MSCCLPP_NCCL_DEFINE_CUSTOM(return_type, name, parameters, arguments)
#define JAX_MSCCLPP_NCCL_DEFINE_DEVICE_API(return_type, name, parameters, arguments)

// (a, b) -> , a, b and () -> nothing: the arguments after the function's id.
#define JAX_MSCCLPP_NCCL_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__

#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) \
  JAX_MSCCLPP_NCCL_DEFINE_##kind(return_type, name, parameters, arguments)
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
