#include "real_nccl.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "jax_mscclpp/settings.h"
#include "last_error.h"

namespace jax_mscclpp::nccl {
namespace {

constexpr const char* kPathVariable = setting_name(Setting::kRealNccl);

const char* const kFunctionNames[] = {
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) #name,
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
};

struct RealLibrary {
  void* handle = nullptr;
  std::string path;
  std::string failure;  // why it did not open, when handle is null
};

std::once_flag open_once;
RealLibrary library;
std::atomic<bool> library_opened{false};

// One slot per function: 0 not looked up yet, kAbsent looked up and missing, else its address.
constexpr std::uintptr_t kAbsent = 1;
std::atomic<std::uintptr_t> function_slots[static_cast<int>(ApiFunction::kCount)];

std::string resolved(const std::string& path) {
  char buffer[PATH_MAX];
  return realpath(path.c_str(), buffer) != nullptr ? std::string(buffer) : path;
}

// Where this library itself lies (resolved), "" if the loader cannot say.
std::string this_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&real_function), &info) == 0 || info.dli_fname == nullptr) return "";
  return resolved(info.dli_fname);
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// Tries `path`; true when it opened (library filled), false with `why` set.
bool try_open(const std::string& path, const std::string& self, std::string& why) {
  if (!self.empty() && resolved(path) == self) {
    why = path + " is this library itself, not NVIDIA's";
    return false;
  }
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr) {
    const char* message = dlerror();
    why = path + ": " + (message != nullptr ? message : "dlopen failed");
    return false;
  }
  library.handle = handle;
  library.path = path;
  return true;
}

void open_library() {
  const std::string self = this_library_path();
  const char* from_environment = setting_value(Setting::kRealNccl);
  std::string why;
  if (from_environment != nullptr && from_environment[0] != '\0') {
    const std::string path(from_environment);
    if (path[0] != '/') {
      library.failure = std::string(kPathVariable) + " must be an absolute path, got '" + path + "'";
    } else if (!try_open(path, self, why)) {
      library.failure = "cannot open the real NCCL named by " + std::string(kPathVariable) + ": " + why;
    }
    return;
  }
  std::string looked_at = "no " + std::string(kPathVariable) + " set";
  if (!self.empty()) {
    const std::string wheel = directory_of(directory_of(directory_of(self))) + "/nvidia/nccl/lib/libnccl.so.2";
    if (try_open(wheel, self, why)) return;
    looked_at += "; " + why;
  }
  library.failure = "found no real NCCL to forward to (" + looked_at + "): set " + kPathVariable +
                    " to the absolute path of NVIDIA's libnccl.so.2, or install the nvidia-nccl wheel "
                    "(nvidia-nccl-cu12 or -cu13) beside jax_mscclpp";
}

}  // namespace

const char* api_function_name(ApiFunction function) { return kFunctionNames[static_cast<int>(function)]; }

namespace {

bool library_open() {
  std::call_once(open_once, [] {
    open_library();
    library_opened.store(library.handle != nullptr, std::memory_order_release);
  });
  return library.handle != nullptr;
}

void* look_up(ApiFunction function, bool report) {
  std::atomic<std::uintptr_t>& slot = function_slots[static_cast<int>(function)];
  std::uintptr_t address = slot.load(std::memory_order_acquire);
  if (address == 0) {
    if (!library_open()) {
      if (report) fail(ncclSystemError, std::string(api_function_name(function)) + ": " + library.failure);
      return nullptr;
    }
    void* found = dlsym(library.handle, api_function_name(function));
    address = found != nullptr ? reinterpret_cast<std::uintptr_t>(found) : kAbsent;
    slot.store(address, std::memory_order_release);
  }
  if (address == kAbsent) {
    if (report)
      fail(ncclSystemError, std::string("the real NCCL at ") + library.path + " has no " + api_function_name(function) +
                              " (it is older than the NCCL API this library exports)");
    return nullptr;
  }
  return reinterpret_cast<void*>(address);
}

}  // namespace

void* real_function(ApiFunction function) { return look_up(function, true); }

ncclResult_t open_real_library() {
  if (library_open()) return ncclSuccess;
  return fail(ncclSystemError, library.failure);
}

void* real_function_if_present(ApiFunction function) { return look_up(function, false); }

const char* real_library_path() {
  return library_opened.load(std::memory_order_acquire) ? library.path.c_str() : "";
}

}  // namespace jax_mscclpp::nccl
