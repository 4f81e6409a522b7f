// How a call goes to the real NCCL: every communicator argument is replaced by what the real library knows it as
// (our_communicator.h), every other argument passes unchanged, and this thread's last error is cleared first.
// Windows of ours (registrations.h) are unwrapped alike. When the real library or the function is missing, or a
// communicator argument is one of ours that has no real communicator (our runtime's alone, where NVIDIA's NCCL
// cannot run; or one whose init has not completed or failed), or a window argument one of such a communicator,
// ncclResult_t functions return ncclSystemError (ncclInvalidUsage for the last cases; the last error says why),
// functions returning nothing return, and others return a value-initialized result.
#pragma once

#include <string>
#include <type_traits>

#include "api_function.h"
#include "last_error.h"
#include "our_communicator.h"
#include "real_nccl.h"
#include "registrations.h"

namespace jax_mscclpp::nccl {

template <typename Value>
Value pass_to_real(Value value) {
  return value;
}
inline ncclComm_t pass_to_real(ncclComm_t comm) { return real_communicator(comm); }
inline ncclWindow_t pass_to_real(ncclWindow_t window) {
  const RegisteredRange* ours = registered_range(window);
  return ours != nullptr ? static_cast<ncclWindow_t>(ours->real) : window;
}

template <typename Value>
bool lacks_real_communicator(Value) {
  return false;
}
inline bool lacks_real_communicator(ncclComm_t comm) {
  const OurCommunicator* ours = our_communicator(comm);
  return ours != nullptr && (setup_state(ours) != ncclSuccess || ours->real == nullptr);
}
inline bool lacks_real_communicator(ncclWindow_t window) {
  const RegisteredRange* ours = registered_range(window);
  return ours != nullptr && ours->real == nullptr;
}

// Why a forwarded call has no real communicator or window to go to (see lacks_real_communicator).
template <typename Value>
std::string why_no_real(Value) {
  return "";
}
inline std::string why_no_real(ncclComm_t comm) {
  const OurCommunicator* ours = our_communicator(comm);
  if (ours == nullptr) return "";
  const ncclResult_t state = setup_state(ours);
  if (state == ncclInProgress) return "the communicator's init has not completed (ncclCommGetAsyncError says when)";
  if (state != ncclSuccess) return "the communicator's init failed: " + ours->setup_error;
  if (ours->real == nullptr)
    return "the communicator runs on jax_mscclpp's runtime alone (NVIDIA's NCCL cannot run on its ranks), which "
           "does not run this call";
  return "";
}
inline std::string why_no_real(ncclWindow_t window) {
  const RegisteredRange* ours = registered_range(window);
  return ours != nullptr && ours->real == nullptr
             ? "the window is one of a communicator of jax_mscclpp's runtime alone, whose kernels copy through "
               "their own scratch: NCCL's device API does not run on it"
             : "";
}

template <typename Function, typename... Arguments>
auto forward_to_real(ApiFunction function, Arguments... arguments) {
  using Result = std::invoke_result_t<Function, Arguments...>;
  if ((lacks_real_communicator(arguments) || ...)) {
    if constexpr (std::is_same_v<Result, ncclResult_t>) {
      std::string why;
      ((why.empty() ? (void)(why = why_no_real(arguments)) : (void)0), ...);
      return fail(ncclInvalidUsage, std::string(api_function_name(function)) + ": " + why);
    } else if constexpr (std::is_void_v<Result>) {
      return;
    } else {
      return Result{};
    }
  }
  Function real_one = real<Function>(function);
  if (real_one == nullptr) {
    if constexpr (std::is_void_v<Result>) {
      return;
    } else if constexpr (std::is_same_v<Result, ncclResult_t>) {
      return ncclSystemError;
    } else {
      return Result{};
    }
  }
  clear_last_error();
  return real_one(pass_to_real(arguments)...);
}

}  // namespace jax_mscclpp::nccl


// The profiling alias p<name> of an entry point defined in the same translation unit.
#define JAX_MSCCLPP_NCCL_ALIAS(return_type, name, parameters) \
  extern "C" __attribute__((visibility("default"), alias(#name))) return_type p##name parameters;
