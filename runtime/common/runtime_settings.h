// Settings of the runtime that every backend reads, process-wide: the one place they live.
//
// The timeout bounds every wait of a collective (a peer that never arrives is an error after it, never a hang).
// It starts as JAX_MSCCLPP_TIMEOUT_S (a positive number of seconds; another value is reported on stderr and
// ignored), else 300, and may be changed at run time. The host backend reads it at every call; the GPU ranks copy
// it into their device-visible RuntimeConfig when they are created and whenever it changes (the module's
// set_timeout_seconds), so kernels launched afterwards wait at most that long.
#pragma once

namespace jax_mscclpp {

constexpr double kDefaultTimeoutSeconds = 300.0;

double timeout_seconds();
// Throws std::invalid_argument unless `seconds` is a positive, finite number.
void set_timeout_seconds(double seconds);

}  // namespace jax_mscclpp
