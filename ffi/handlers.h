// Every FFI handler the module registers, by platform: (target name, handler symbol) pairs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace jax_mscclpp {

using HandlerList = std::vector<std::pair<std::string, void*>>;

// Platform "cpu": the host reference backend.
const HandlerList& cpu_handlers();

}  // namespace jax_mscclpp
