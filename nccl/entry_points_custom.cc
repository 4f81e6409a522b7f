// The CUSTOM rows of api_functions.def, and their p<name> aliases: versions, ids, error texts, communicator
// creation (a communicator made through this library is wrapped in one of ours, our_communicator.h; an id of ours
// makes one of our runtime's, our_runtime.h), queries and destruction, the group calls (group_depth.h), and
// buffers and their registration (registrations.h). Every body runs guarded (guarded.h): no exception leaves.
#include <string>

#include "ending_order.h"
#include "forwarding.h"
#include "group_depth.h"
#include "guarded.h"
#include "our_runtime.h"
#include "registrations.h"

#define JAX_MSCCLPP_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

using namespace jax_mscclpp::nccl;

namespace {

// A communicator the real library returned through `out`, handed to the caller as one of ours. NCCL sets `out`
// on success and, for a non-blocking communicator, with ncclInProgress; `out` keeps the real library's value
// (null or not) on any other result.
ncclResult_t handed_out(ncclResult_t result, ncclComm_t real, ncclComm_t* out) {
  if (result == ncclSuccess || result == ncclInProgress) *out = wrap_real_communicator(real);
  else *out = real;
  return result;
}

ncclResult_t null_argument(const char* function, const char* argument) {
  return fail(ncclInvalidArgument, std::string(function) + ": " + argument + " is NULL");
}

// Destroy and abort: a communicator whose setup still runs elsewhere is let go (our_runtime.h,
// release_pending_setup); else its parts end in ending_order.h's order: destroy ends the real library's
// communicator (if there is one), then, once that succeeded, our runtime's part (release_runtime: its outstanding
// operations complete, then a bounded barrier) and ours; abort stops our runtime's part first (its kernels stopped
// from the host, returning at once), then the real library's abort, then ours.
template <typename Function>
ncclResult_t end_communicator(ApiFunction function, ncclComm_t comm) {
  OurCommunicator* ours = our_communicator(comm);
  if (ours == nullptr) return forward_to_real<Function>(function, comm);
  if (release_pending_setup(ours)) {
    clear_last_error();
    return ncclSuccess;
  }
  return end_in_order(function == ApiFunction::ncclCommAbort,
                      {[&] { return ours->real == nullptr ? ncclSuccess : forward_to_real<Function>(function, comm); },
                       [&](bool orderly) { release_runtime(ours, orderly); },
                       [&] {
                         release_our_communicator(ours);
                         clear_last_error();
                       }});
}

// The group calls go to the real library unless our runtime is on and the real library was never needed (every
// communicator so far is our runtime's alone).
bool groups_go_to_real() { return !our_runtime_enabled() || real_library_path()[0] != '\0'; }

// How many of the calling thread's open groups the real library was told of (the real library may open during a
// group, at the setup of a communicator inited in it: then it never saw that group's start, and sees no end).
thread_local int real_group_depth = 0;

}  // namespace

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  return guarded("ncclGetVersion", [&] {
    if (version == nullptr) return null_argument("ncclGetVersion", "version");
    if (auto real_one = real_if_present<decltype(&ncclGetVersion)>(ApiFunction::ncclGetVersion)) {
      clear_last_error();
      return real_one(version);
    }
    clear_last_error();
    *version = JAX_MSCCLPP_NCCL_HEADER_VERSION_CODE;
    return ncclSuccess;
  });
}

// Ours while our runtime is on (our_runtime.h); the real library's otherwise.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded("ncclGetUniqueId", [&] {
    if (uniqueId == nullptr) return null_argument("ncclGetUniqueId", "uniqueId");
    if (our_runtime_enabled()) return make_our_unique_id(uniqueId);
    return forward_to_real<decltype(&ncclGetUniqueId)>(ApiFunction::ncclGetUniqueId, uniqueId);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                            int rank, ncclConfig_t* config) {
  return guarded("ncclCommInitRankConfig", [&] {
    if (comm == nullptr) return null_argument("ncclCommInitRankConfig", "comm");
    if (is_our_unique_id(commId)) return init_our_communicator(comm, nranks, commId, rank, config);
    ncclComm_t real_one = nullptr;
    const ncclResult_t result = forward_to_real<decltype(&ncclCommInitRankConfig)>(
        ApiFunction::ncclCommInitRankConfig, &real_one, nranks, commId, rank, config);
    return handed_out(result, real_one, comm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return guarded("ncclCommInitRank", [&] {
    if (comm == nullptr) return null_argument("ncclCommInitRank", "comm");
    if (is_our_unique_id(commId)) return init_our_communicator(comm, nranks, commId, rank, nullptr);
    ncclComm_t real_one = nullptr;
    const ncclResult_t result =
        forward_to_real<decltype(&ncclCommInitRank)>(ApiFunction::ncclCommInitRank, &real_one, nranks, commId, rank);
    return handed_out(result, real_one, comm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  return guarded("ncclCommInitAll", [&] {
    if (comm == nullptr) return null_argument("ncclCommInitAll", "comm");
    const ncclResult_t result =
        forward_to_real<decltype(&ncclCommInitAll)>(ApiFunction::ncclCommInitAll, comm, ndev, devlist);
    if (result == ncclSuccess || result == ncclInProgress) {
      for (int i = 0; i < ndev; ++i) comm[i] = wrap_real_communicator(comm[i]);
    }
    return result;
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                              ncclUniqueId* commIds, ncclConfig_t* config) {
  return guarded("ncclCommInitRankScalable", [&] {
    if (newcomm == nullptr) return null_argument("ncclCommInitRankScalable", "newcomm");
    if (nId >= 1 && commIds != nullptr && is_our_unique_id(commIds[0])) {
      return init_our_communicator(newcomm, nranks, commIds[0], myrank, config);
    }
    ncclComm_t real_one = nullptr;
    const ncclResult_t result = forward_to_real<decltype(&ncclCommInitRankScalable)>(
        ApiFunction::ncclCommInitRankScalable, &real_one, nranks, myrank, nId, commIds, config);
    return handed_out(result, real_one, newcomm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                                   ncclConfig_t* config) {
  return guarded("ncclCommSplit", [&] {
    if (newcomm == nullptr) return null_argument("ncclCommSplit", "newcomm");
    if (OurCommunicator* ours = with_runtime(comm)) return split_our_communicator(ours, color, key, newcomm, config);
    ncclComm_t real_one = nullptr;
    const ncclResult_t result =
        forward_to_real<decltype(&ncclCommSplit)>(ApiFunction::ncclCommSplit, comm, color, key, &real_one, config);
    return handed_out(result, real_one, newcomm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                                    ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return guarded("ncclCommShrink", [&] {
    if (newcomm == nullptr) return null_argument("ncclCommShrink", "newcomm");
    if (OurCommunicator* ours = with_runtime(comm))
      return shrink_our_communicator(ours, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
    ncclComm_t real_one = nullptr;
    const ncclResult_t result = forward_to_real<decltype(&ncclCommShrink)>(
        ApiFunction::ncclCommShrink, comm, excludeRanksList, excludeRanksCount, &real_one, config, shrinkFlags);
    return handed_out(result, real_one, newcomm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                                                  ncclComm_t* newcomm, ncclConfig_t* config) {
  return guarded("ncclCommGrow", [&] {
    if (newcomm == nullptr) return null_argument("ncclCommGrow", "newcomm");
    ncclComm_t real_one = nullptr;
    const ncclResult_t result = forward_to_real<decltype(&ncclCommGrow)>(ApiFunction::ncclCommGrow, comm, nRanks,
                                                                         uniqueId, rank, &real_one, config);
    return handed_out(result, real_one, newcomm);
  });
}

// Ours has nothing to flush (every launch is on the caller's streams); NVIDIA's part is NVIDIA's.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded("ncclCommFinalize", [&] {
    if (runtime_only(comm) != nullptr) {
      clear_last_error();
      return ncclSuccess;
    }
    return forward_to_real<decltype(&ncclCommFinalize)>(ApiFunction::ncclCommFinalize, comm);
  });
}

// ncclInProgress while the communicator's setup runs, then its result; a kernel of our runtime that failed and
// stopped (JAX_MSCCLPP_TRAP_ON_FAILURE=0) leaves the communicator failed: ncclRemoteError, as NCCL reports a peer's
// failure, whether or not a real communicator is beside ours; else the real communicator's, where there is one.
// (A kernel that traps ends the process's use of the GPU, with a record on stderr.)
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guarded("ncclCommGetAsyncError", [&] {
    if (asyncError == nullptr) return null_argument("ncclCommGetAsyncError", "asyncError");
    if (const OurCommunicator* ours = our_communicator(comm)) {
      const ncclResult_t state = setup_state(ours);
      // A late peer is no error, as in NVIDIA's NCCL, which waits: its warning, once (our_runtime.h).
      if (state == ncclSuccess && ours->runtime != nullptr) report_late_wait(ours);
      if (state != ncclSuccess || (ours->runtime != nullptr && runtime_failed(ours)) || ours->real == nullptr) {
        *asyncError = state != ncclSuccess ? state : ours->runtime != nullptr && runtime_failed(ours) ? ncclRemoteError
                                                                                                      : ncclSuccess;
        clear_last_error();
        return ncclSuccess;
      }
    }
    return forward_to_real<decltype(&ncclCommGetAsyncError)>(ApiFunction::ncclCommGetAsyncError, comm, asyncError);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return guarded("ncclCommCount", [&] {
    if (count == nullptr) return null_argument("ncclCommCount", "count");
    if (const OurCommunicator* ours = runtime_only(comm)) {
      *count = runtime_nranks(ours);
      return ncclSuccess;
    }
    return forward_to_real<decltype(&ncclCommCount)>(ApiFunction::ncclCommCount, comm, count);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guarded("ncclCommCuDevice", [&] {
    if (device == nullptr) return null_argument("ncclCommCuDevice", "device");
    if (const OurCommunicator* ours = runtime_only(comm)) {
      *device = runtime_device(ours);
      return ncclSuccess;
    }
    return forward_to_real<decltype(&ncclCommCuDevice)>(ApiFunction::ncclCommCuDevice, comm, device);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guarded("ncclCommUserRank", [&] {
    if (rank == nullptr) return null_argument("ncclCommUserRank", "rank");
    if (const OurCommunicator* ours = runtime_only(comm)) {
      *rank = runtime_rank(ours);
      return ncclSuccess;
    }
    return forward_to_real<decltype(&ncclCommUserRank)>(ApiFunction::ncclCommUserRank, comm, rank);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guarded("ncclCommDestroy",
                 [&] { return end_communicator<decltype(&ncclCommDestroy)>(ApiFunction::ncclCommDestroy, comm); });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guarded("ncclCommAbort",
                 [&] { return end_communicator<decltype(&ncclCommAbort)>(ApiFunction::ncclCommAbort, comm); });
}

// The real library's text when it is there; ours when it cannot be opened.
JAX_MSCCLPP_NCCL_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  return guarded_value("ncclGetErrorString", result_description(result), [&] {
    if (auto real_one = real_if_present<decltype(&ncclGetErrorString)>(ApiFunction::ncclGetErrorString)) {
      return real_one(result);
    }
    return result_description(result);
  });
}

// This thread's last failure in this library when the latest call failed here; else, for one of ours, its failed
// setup's text or its runtime's failure record; else the real library's last error. Neither changes the last error.
JAX_MSCCLPP_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  return guarded_value("ncclGetLastError", "", [&]() -> const char* {
    const char* mine = last_error();
    if (mine[0] != '\0') return mine;
    if (const OurCommunicator* ours = our_communicator(comm)) {
      const ncclResult_t state = setup_state(ours);
      if (state != ncclSuccess && state != ncclInProgress) return ours->setup_error.c_str();
      if (state == ncclSuccess && ours->runtime != nullptr && runtime_failed(ours)) {
        thread_local std::string record;
        record = "jax_mscclpp libnccl.so.2: the communicator failed: " + runtime_failure(ours);
        return record.c_str();
      }
    }
    if (auto real_one = real_if_present<decltype(&ncclGetLastError)>(ApiFunction::ncclGetLastError)) {
      return real_one(real_communicator(comm));
    }
    return mine;
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGroupStart(void) {
  return guarded("ncclGroupStart", [&] {
    if (!groups_go_to_real()) {
      clear_last_error();
      enter_group();
      return ncclSuccess;
    }
    const ncclResult_t result = forward_to_real<decltype(&ncclGroupStart)>(ApiFunction::ncclGroupStart);
    if (result == ncclSuccess) {
      enter_group();
      ++real_group_depth;
    }
    return result;
  });
}

// The outermost end first makes the splits and shrinks of the group (our_runtime.h, run_group_children), sets up
// the communicators inited in the group (run_group_setups), then launches what our runtime queued in it
// (end_group), then the real library's group ends (where it got the start; an end without any start is the real
// library's to answer). The first failure is the result, with its last
// error; a non-blocking init in the group makes it ncclInProgress.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGroupEnd(void) {
  return guarded("ncclGroupEnd", [&] {
    const bool unbalanced = group_depth() == 0;
    leave_group();
    ncclResult_t ours = ncclSuccess;
    std::string ours_error;
    if (group_depth() == 0 && !unbalanced) {
      ours = run_group_children();
      if (ours != ncclSuccess) ours_error = last_error();
      if (const ncclResult_t setups = run_group_setups();
          setups != ncclSuccess && (ours == ncclSuccess || ours == ncclInProgress)) {
        ours = setups;
        ours_error = last_error();
      }
      if (const ncclResult_t windows = run_group_windows();
          windows != ncclSuccess && (ours == ncclSuccess || ours == ncclInProgress)) {
        ours = windows;
        ours_error = last_error();
      }
      const ncclResult_t launched = end_group();
      if (launched != ncclSuccess && (ours == ncclSuccess || ours == ncclInProgress)) {
        ours = launched;
        ours_error = last_error();
      }
    }
    ncclResult_t result = ours;
    if (groups_go_to_real() && (real_group_depth > 0 || unbalanced)) {
      if (real_group_depth > 0) --real_group_depth;
      const ncclResult_t real_result = forward_to_real<decltype(&ncclGroupEnd)>(ApiFunction::ncclGroupEnd);
      if (ours == ncclSuccess) return real_result;
    }
    if (!ours_error.empty()) restore_last_error(ours_error);
    else if (result == ncclSuccess || result == ncclInProgress) clear_last_error();
    return result;
  });
}

// Nothing of the group runs, now or later: our runtime's queue is dropped (discard_group), inits queued in the
// group are not made (their handles are ncclInvalidUsage), and the real library simulates its part. simInfo gets
// the estimate of both.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guarded("ncclGroupSimulateEnd", [&] {
    if (simInfo == nullptr) return null_argument("ncclGroupSimulateEnd", "simInfo");
    leave_group();
    float estimate = 0.0f;
    if (group_depth() == 0) {
      estimate = estimate_group_microseconds(queued_group());
      discard_group();
      discard_group_children();
      discard_group_setups();
      discard_group_windows();
    }
    ncclResult_t result = ncclSuccess;
    if (groups_go_to_real() && real_group_depth > 0) {
      --real_group_depth;
      ncclSimInfo_t real_info = *simInfo;
      result = forward_to_real<decltype(&ncclGroupSimulateEnd)>(ApiFunction::ncclGroupSimulateEnd, &real_info);
      if (result == ncclSuccess && real_info.estimatedTime > 0.0f) estimate += real_info.estimatedTime;
    } else {
      clear_last_error();
    }
    simInfo->estimatedTime = estimate;
    return result;
  });
}

// Ours while our runtime is on (our_runtime.h, allocate_buffer: it needs no real library); NVIDIA's otherwise. A
// pointer is freed by whichever allocated it.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guarded("ncclMemAlloc", [&] {
    if (our_runtime_enabled()) return allocate_buffer(ptr, size);
    return forward_to_real<decltype(&ncclMemAlloc)>(ApiFunction::ncclMemAlloc, ptr, size);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  return guarded("ncclMemFree", [&] {
    if (owns_buffer(ptr)) return free_buffer(ptr);
    return forward_to_real<decltype(&ncclMemFree)>(ApiFunction::ncclMemFree, ptr);
  });
}

// On a communicator with our runtime: a RegisteredRange of ours (registrations.h), holding the real communicator's
// registration where there is one beside; NVIDIA's communicators: NVIDIA's handle.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guarded("ncclCommRegister", [&] {
    if (handle == nullptr) return null_argument("ncclCommRegister", "handle");
    OurCommunicator* ours = with_runtime(comm);
    if (ours == nullptr)
      return forward_to_real<decltype(&ncclCommRegister)>(ApiFunction::ncclCommRegister, comm, buff, size, handle);
    void* real_handle = nullptr;
    if (ours->real != nullptr &&
        forward_to_real<decltype(&ncclCommRegister)>(ApiFunction::ncclCommRegister, comm, buff, size, &real_handle) !=
            ncclSuccess)
      real_handle = nullptr;  // NVIDIA's calls on this buffer then run unregistered, as they may
    RegisteredRange* range = make_registered_range(buff, size, runtime_nranks(ours), real_handle);
    if (range == nullptr) return fail(ncclSystemError, "ncclCommRegister: out of host memory");
    register_buffer(ours, buff, size);
    *handle = range;
    clear_last_error();
    return ncclSuccess;
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guarded("ncclCommDeregister", [&] {
    RegisteredRange* range = registered_range(handle);
    if (range == nullptr)
      return forward_to_real<decltype(&ncclCommDeregister)>(ApiFunction::ncclCommDeregister, comm, handle);
    ncclResult_t result = ncclSuccess;
    if (range->real != nullptr)
      result = forward_to_real<decltype(&ncclCommDeregister)>(ApiFunction::ncclCommDeregister, comm, range->real);
    if (result == ncclSuccess) {
      if (OurCommunicator* ours = with_runtime(comm); ours != nullptr)
        deregister_buffer(ours, range->buffer, range->bytes);
      release_registered_range(range);
      clear_last_error();
    }
    return result;
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                            int winFlags) {
  return guarded("ncclCommWindowRegister", [&] {
    if (win == nullptr) return null_argument("ncclCommWindowRegister", "win");
    OurCommunicator* ours = with_runtime(comm);
    if (ours == nullptr)
      return forward_to_real<decltype(&ncclCommWindowRegister)>(ApiFunction::ncclCommWindowRegister, comm, buff, size,
                                                                win, winFlags);
    ncclWindow_t real_window = nullptr;
    if (ours->real != nullptr && forward_to_real<decltype(&ncclCommWindowRegister)>(
                                     ApiFunction::ncclCommWindowRegister, comm, buff, size, &real_window,
                                     winFlags) != ncclSuccess)
      real_window = nullptr;
    RegisteredRange* range = make_registered_range(buff, size, runtime_nranks(ours), real_window);
    if (range == nullptr) return fail(ncclSystemError, "ncclCommWindowRegister: out of host memory");
    // In a group, range->window is set at the outermost ncclGroupEnd (our_runtime.h).
    if (const ncclResult_t registered = register_window(ours, buff, size, winFlags, &range->window);
        registered != ncclSuccess) {
      if (real_window != nullptr)
        (void)forward_to_real<decltype(&ncclCommWindowDeregister)>(ApiFunction::ncclCommWindowDeregister, comm,
                                                                   real_window);
      release_registered_range(range);
      return registered;
    }
    *win = reinterpret_cast<ncclWindow_t>(range);
    clear_last_error();
    return ncclSuccess;
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guarded("ncclCommWindowDeregister", [&] {
    RegisteredRange* range = registered_range(win);
    if (range == nullptr)
      return forward_to_real<decltype(&ncclCommWindowDeregister)>(ApiFunction::ncclCommWindowDeregister, comm, win);
    ncclResult_t result = ncclSuccess;
    if (range->real != nullptr)
      result = forward_to_real<decltype(&ncclCommWindowDeregister)>(ApiFunction::ncclCommWindowDeregister, comm,
                                                                    static_cast<ncclWindow_t>(range->real));
    if (result == ncclSuccess) {
      if (OurCommunicator* ours = with_runtime(comm); ours != nullptr && range->window != nullptr)
        deregister_window(ours, range->window);
      release_registered_range(range);
      clear_last_error();
    }
    return result;
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  return guarded("ncclWinGetUserPtr", [&] {
    if (outUserPtr == nullptr) return null_argument("ncclWinGetUserPtr", "outUserPtr");
    if (const RegisteredRange* range = registered_range(win)) {
      *outUserPtr = range->buffer;
      clear_last_error();
      return ncclSuccess;
    }
    return forward_to_real<decltype(&ncclWinGetUserPtr)>(ApiFunction::ncclWinGetUserPtr, comm, win, outUserPtr);
  });
}

#define JAX_MSCCLPP_NCCL_ALIAS_FORWARD(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_OPERATION(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_DEVICE_API(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_CUSTOM(return_type, name, parameters) \
  JAX_MSCCLPP_NCCL_ALIAS(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) \
  JAX_MSCCLPP_NCCL_ALIAS_##kind(return_type, name, parameters)
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
