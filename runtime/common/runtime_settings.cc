#include "runtime_settings.h"

#include "jax_mscclpp/settings.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace jax_mscclpp {
namespace {

double timeout_from_environment() {
  const char* env = setting_value(Setting::kTimeout);
  if (env == nullptr) return kDefaultTimeoutSeconds;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end != env && *end == '\0' && v > 0 && std::isfinite(v)) return v;
  std::fprintf(stderr, "jax_mscclpp: ignoring JAX_MSCCLPP_TIMEOUT_S=\"%s\" (not a positive number of seconds); "
               "the timeout is %g s\n", env, kDefaultTimeoutSeconds);
  return kDefaultTimeoutSeconds;
}

std::atomic<double>& timeout_setting() {
  static std::atomic<double> s{timeout_from_environment()};
  return s;
}

}  // namespace

double timeout_seconds() { return timeout_setting().load(std::memory_order_relaxed); }

void set_timeout_seconds(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds))
    throw std::invalid_argument("jax_mscclpp: the timeout must be a positive number of seconds, got " +
                                std::to_string(seconds));
  timeout_setting().store(seconds, std::memory_order_relaxed);
}

}  // namespace jax_mscclpp
