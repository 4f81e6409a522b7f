// The native side's one reader of jax_mscclpp's environment variables (settings.def): host code only. Values are
// checked by the Python package at import (settings.py), with one policy for a value that is not understood; a
// native reader given one anyway (a process without the package, e.g. the NCCL-API library under LD_PRELOAD) falls
// back to the default and says so on stderr where it reads it.
#pragma once

#include <cstdlib>

namespace jax_mscclpp {

enum class Setting {
#define JAX_MSCCLPP_SETTING(enumerator, name, kind, default_value, what) enumerator,
#include "jax_mscclpp/settings.def"
};

constexpr const char* setting_name(Setting setting) {
  switch (setting) {
#define JAX_MSCCLPP_SETTING(enumerator, name, kind, default_value, what) \
  case Setting::enumerator:                                            \
    return name;
#include "jax_mscclpp/settings.def"
  }
  return "";
}

// The variable's value; nullptr when it is unset or empty (both mean: the default).
inline const char* setting_value(Setting setting) {
  const char* value = std::getenv(setting_name(setting));
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

}  // namespace jax_mscclpp
