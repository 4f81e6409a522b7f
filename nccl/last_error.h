// The text ncclGetLastError returns for failures this library itself reports (no real NCCL, a function the real
// library lacks, bad arguments it checks), and NCCL's names of the result codes.
//
// The text is per thread: a failing call sets it, and every call this library forwards to the real NCCL clears
// it, so ncclGetLastError answers for the latest call of the calling thread; when this library has nothing to
// say, ncclGetLastError asks the real library.
#pragma once

#include <string>

#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

// Records `text` (prefixed with this library's name) as this thread's last error and returns `code`.
ncclResult_t fail(ncclResult_t code, const std::string& text);
void clear_last_error();
// Sets this thread's last error back to `text`, a value last_error() returned (prefix included).
void restore_last_error(const std::string& text);
// This thread's last error, "" when the latest call did not fail here.
const char* last_error();
// A short description of `result`, for when there is no real library to ask.
const char* result_description(ncclResult_t result);

}  // namespace jax_mscclpp::nccl
