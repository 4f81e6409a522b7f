// The exported functions as values (one enumerator per row of api_functions.def), so that the real library's
// addresses can be kept in one table and the route decision can be told which operation it decides for.
#pragma once

namespace jax_mscclpp::nccl {

enum class ApiFunction : int {
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) name,
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
  kCount
};

// The function's name, as exported and as looked up in the real library.
const char* api_function_name(ApiFunction function);

}  // namespace jax_mscclpp::nccl
