// No C++ exception leaves an entry point: each runs its body through guarded(), which maps an exception to NCCL's
// codes with a last error (last_error.h) naming the function: std::bad_alloc and std::system_error (threads,
// sockets) to ncclSystemError, any other std::exception and anything else thrown to ncclInternalError.
// guarded_value() does the same for the entry points that return a value, which then return `fallback`.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "last_error.h"

namespace jax_mscclpp::nccl {

inline ncclResult_t exception_result(const char* function) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(ncclSystemError, std::string(function) + ": out of host memory");
  } catch (const std::system_error& error) {
    return fail(ncclSystemError, std::string(function) + ": " + error.what());
  } catch (const std::exception& error) {
    return fail(ncclInternalError, std::string(function) + ": " + error.what());
  } catch (...) {
    return fail(ncclInternalError, std::string(function) + ": an unknown exception");
  }
}

template <class F>
ncclResult_t guarded(const char* function, F&& body) noexcept {
  try {
    return std::forward<F>(body)();
  } catch (...) {
    return exception_result(function);
  }
}

template <class Value, class F>
Value guarded_value(const char* function, Value fallback, F&& body) noexcept {
  try {
    return std::forward<F>(body)();
  } catch (...) {
    exception_result(function);
    return fallback;
  }
}

}  // namespace jax_mscclpp::nccl
