// Numbers in error messages, without iostreams. The native modules build every message with std::string,
// std::to_string and these helpers (docs/architecture.md, "Error messages"): formatting a number through an
// ostream needs the C++ library's locale facets, which a module built by a toolchain that links part of the
// C++ library statically cannot always reach, and an error path must not crash where it reports.
#pragma once

#include <cstdio>
#include <string>

namespace jax_mscclpp {

// Seconds as a user wrote them: 0.5 -> "0.5", 300 -> "300" (printf's %g).
inline std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

}  // namespace jax_mscclpp
