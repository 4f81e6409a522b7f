// The native side's one reader of jax_mscclpp's environment variables (settings.def): host code only. Values are
// checked by the Python package at import (settings.py), with one policy for a value that is not understood; a
// native reader given one anyway (a process without the package, e.g. the NCCL-API library under LD_PRELOAD) falls
// back to the default and says so on stderr where it reads it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace jax_mscclpp {

enum class Setting {
#define JAX_MSCCLPP_SETTING(enumerator, name, kind, default_value, what) enumerator,
#include "jax_mscclpp/settings.def"
};

// Every row's name and default (in words; for kPositiveInteger rows, the number), indexed by Setting.
struct SettingRow {
  const char* name;
  const char* default_value;
};
inline constexpr SettingRow kSettingRows[] = {
#define JAX_MSCCLPP_SETTING(enumerator, name, kind, default_value, what) {name, default_value},
#include "jax_mscclpp/settings.def"
};

constexpr const char* setting_name(Setting setting) { return kSettingRows[static_cast<int>(setting)].name; }
constexpr const char* setting_default(Setting setting) {
  return kSettingRows[static_cast<int>(setting)].default_value;
}

// The variable's value; nullptr when it is unset or empty (both mean: the default).
inline const char* setting_value(Setting setting) {
  const char* value = std::getenv(setting_name(setting));
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

namespace settings_detail {
inline uint64_t parse_positive_integer(const char* text) {
  if (text == nullptr || *text < '0' || *text > '9') return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  return *end == '\0' ? static_cast<uint64_t>(v) : 0;
}
}  // namespace settings_detail

// A kPositiveInteger row's value: the variable's, else `fallback`; a value that is not a positive integer gives
// `fallback` and a line on stderr.
inline uint64_t positive_integer_setting(Setting setting, uint64_t fallback) {
  const char* value = setting_value(setting);
  if (value == nullptr) return fallback;
  const uint64_t v = settings_detail::parse_positive_integer(value);
  if (v > 0) return v;
  std::fprintf(stderr, "jax_mscclpp: ignoring %s=\"%s\" (not a positive integer); using %llu\n",
               setting_name(setting), value, static_cast<unsigned long long>(fallback));
  return fallback;
}

// The same with the row's default, for rows whose default is a number.
inline uint64_t positive_integer_setting(Setting setting) {
  return positive_integer_setting(setting, settings_detail::parse_positive_integer(setting_default(setting)));
}

}  // namespace jax_mscclpp
