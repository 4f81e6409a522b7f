#include "last_error.h"

namespace jax_mscclpp::nccl {
namespace {

thread_local std::string this_thread_error;

}  // namespace

ncclResult_t fail(ncclResult_t code, const std::string& text) {
  this_thread_error = "jax_mscclpp libnccl.so.2: " + text;
  return code;
}

void clear_last_error() { this_thread_error.clear(); }

void restore_last_error(const std::string& text) { this_thread_error = text; }

const char* last_error() { return this_thread_error.c_str(); }

const char* result_description(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "success";
    case ncclUnhandledCudaError: return "a CUDA call failed";
    case ncclSystemError: return "a system call failed, or a library could not be loaded";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "an argument is invalid";
    case ncclInvalidUsage: return "the call is not allowed here";
    case ncclRemoteError: return "a remote process or the network failed";
    case ncclInProgress: return "the operation is still in progress";
    case ncclTimeout: return "the operation timed out";
    default: return "unknown result code";
  }
}

}  // namespace jax_mscclpp::nccl
