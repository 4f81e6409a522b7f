// Every FFI handler the module registers, by platform: (target name, handler symbol) pairs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace jax_mscclpp {

using HandlerList = std::vector<std::pair<std::string, void*>>;

// Platform "cpu": the host reference backend.
const HandlerList& cpu_handlers();
// Platform "CUDA" (CUDA builds only): ffi/cuda/handlers_cuda.cc.
const HandlerList& cuda_handlers();

}  // namespace jax_mscclpp
