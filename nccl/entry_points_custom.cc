// The CUSTOM rows of api_functions.def, and their p<name> aliases: versions, ids, error texts, communicator
// creation (a communicator made through this library is wrapped in one of ours, our_communicator.h; an id of ours
// makes one of our runtime's, our_runtime.h), queries and destruction, and the group calls (group_depth.h).
#include <string>

#include "forwarding.h"
#include "group_depth.h"
#include "our_runtime.h"

using namespace jax_mscclpp::nccl;

#define JAX_MSCCLPP_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

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

// Destroy and abort: the real library frees the communicator it made (if there is one); ours goes once that
// succeeded (on failure the caller still holds a valid handle, to retry or abort), our runtime's part with it
// (destroy first waits for every rank to destroy theirs; abort does not).
template <typename Function>
ncclResult_t end_communicator(ApiFunction function, ncclComm_t comm) {
  OurCommunicator* ours = our_communicator(comm);
  const ncclResult_t result =
      ours != nullptr && ours->real == nullptr ? ncclSuccess : forward_to_real<Function>(function, comm);
  if (ours != nullptr && result == ncclSuccess) {
    release_runtime(ours, function == ApiFunction::ncclCommDestroy);
    release_our_communicator(ours);
  }
  return result;
}

// The group calls go to the real library unless our runtime is on and the real library was never needed (every
// communicator so far is our runtime's alone).
bool groups_go_to_real() { return !our_runtime_enabled() || real_library_path()[0] != '\0'; }

// A query of a communicator of ours with a runtime and no real communicator, answered here.
OurCommunicator* runtime_only(ncclComm_t comm) {
  OurCommunicator* ours = our_communicator(comm);
  return ours != nullptr && ours->runtime != nullptr && ours->real == nullptr ? ours : nullptr;
}

}  // namespace

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return null_argument("ncclGetVersion", "version");
  if (auto real_one = real_if_present<decltype(&ncclGetVersion)>(ApiFunction::ncclGetVersion)) {
    clear_last_error();
    return real_one(version);
  }
  clear_last_error();
  *version = JAX_MSCCLPP_NCCL_HEADER_VERSION_CODE;
  return ncclSuccess;
}

// Ours while our runtime is on (our_runtime.h); the real library's otherwise.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return null_argument("ncclGetUniqueId", "uniqueId");
  if (our_runtime_enabled()) return make_our_unique_id(uniqueId);
  return forward_to_real<decltype(&ncclGetUniqueId)>(ApiFunction::ncclGetUniqueId, uniqueId);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                            int rank, ncclConfig_t* config) {
  if (comm == nullptr) return null_argument("ncclCommInitRankConfig", "comm");
  if (is_our_unique_id(commId)) return init_our_communicator(comm, nranks, commId, rank, config);
  ncclComm_t real_one = nullptr;
  const ncclResult_t result = forward_to_real<decltype(&ncclCommInitRankConfig)>(
      ApiFunction::ncclCommInitRankConfig, &real_one, nranks, commId, rank, config);
  return handed_out(result, real_one, comm);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (comm == nullptr) return null_argument("ncclCommInitRank", "comm");
  if (is_our_unique_id(commId)) return init_our_communicator(comm, nranks, commId, rank, nullptr);
  ncclComm_t real_one = nullptr;
  const ncclResult_t result =
      forward_to_real<decltype(&ncclCommInitRank)>(ApiFunction::ncclCommInitRank, &real_one, nranks, commId, rank);
  return handed_out(result, real_one, comm);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (comm == nullptr) return null_argument("ncclCommInitAll", "comm");
  const ncclResult_t result =
      forward_to_real<decltype(&ncclCommInitAll)>(ApiFunction::ncclCommInitAll, comm, ndev, devlist);
  if (result == ncclSuccess || result == ncclInProgress) {
    for (int i = 0; i < ndev; ++i) comm[i] = wrap_real_communicator(comm[i]);
  }
  return result;
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                              ncclUniqueId* commIds, ncclConfig_t* config) {
  if (newcomm == nullptr) return null_argument("ncclCommInitRankScalable", "newcomm");
  if (nId >= 1 && commIds != nullptr && is_our_unique_id(commIds[0])) {
    return init_our_communicator(newcomm, nranks, commIds[0], myrank, config);
  }
  ncclComm_t real_one = nullptr;
  const ncclResult_t result = forward_to_real<decltype(&ncclCommInitRankScalable)>(
      ApiFunction::ncclCommInitRankScalable, &real_one, nranks, myrank, nId, commIds, config);
  return handed_out(result, real_one, newcomm);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                                   ncclConfig_t* config) {
  if (newcomm == nullptr) return null_argument("ncclCommSplit", "newcomm");
  if (OurCommunicator* ours = our_communicator(comm); ours != nullptr && ours->runtime != nullptr) {
    return split_our_communicator(ours, color, key, newcomm, config);
  }
  ncclComm_t real_one = nullptr;
  const ncclResult_t result =
      forward_to_real<decltype(&ncclCommSplit)>(ApiFunction::ncclCommSplit, comm, color, key, &real_one, config);
  return handed_out(result, real_one, newcomm);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                                    ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (newcomm == nullptr) return null_argument("ncclCommShrink", "newcomm");
  ncclComm_t real_one = nullptr;
  const ncclResult_t result = forward_to_real<decltype(&ncclCommShrink)>(
      ApiFunction::ncclCommShrink, comm, excludeRanksList, excludeRanksCount, &real_one, config, shrinkFlags);
  return handed_out(result, real_one, newcomm);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                                                  ncclComm_t* newcomm, ncclConfig_t* config) {
  if (newcomm == nullptr) return null_argument("ncclCommGrow", "newcomm");
  ncclComm_t real_one = nullptr;
  const ncclResult_t result = forward_to_real<decltype(&ncclCommGrow)>(ApiFunction::ncclCommGrow, comm, nRanks,
                                                                       uniqueId, rank, &real_one, config);
  return handed_out(result, real_one, newcomm);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (runtime_only(comm) != nullptr) return ncclSuccess;
  return forward_to_real<decltype(&ncclCommFinalize)>(ApiFunction::ncclCommFinalize, comm);
}

// A kernel of our runtime that fails traps by default, which ends the process's use of the GPU (it says so on
// stderr, and every later CUDA call fails); one that stops (JAX_MSCCLPP_TRAP_ON_FAILURE=0) leaves the communicator
// failed: ncclRemoteError here, as NCCL reports a peer's failure.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (asyncError == nullptr) return null_argument("ncclCommGetAsyncError", "asyncError");
  if (const OurCommunicator* ours = runtime_only(comm)) {
    *asyncError = runtime_failed(ours) ? ncclRemoteError : ncclSuccess;
    return ncclSuccess;
  }
  return forward_to_real<decltype(&ncclCommGetAsyncError)>(ApiFunction::ncclCommGetAsyncError, comm, asyncError);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (count == nullptr) return null_argument("ncclCommCount", "count");
  if (const OurCommunicator* ours = runtime_only(comm)) {
    *count = runtime_nranks(ours);
    return ncclSuccess;
  }
  return forward_to_real<decltype(&ncclCommCount)>(ApiFunction::ncclCommCount, comm, count);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (device == nullptr) return null_argument("ncclCommCuDevice", "device");
  if (const OurCommunicator* ours = runtime_only(comm)) {
    *device = runtime_device(ours);
    return ncclSuccess;
  }
  return forward_to_real<decltype(&ncclCommCuDevice)>(ApiFunction::ncclCommCuDevice, comm, device);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (rank == nullptr) return null_argument("ncclCommUserRank", "rank");
  if (const OurCommunicator* ours = runtime_only(comm)) {
    *rank = runtime_rank(ours);
    return ncclSuccess;
  }
  return forward_to_real<decltype(&ncclCommUserRank)>(ApiFunction::ncclCommUserRank, comm, rank);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return end_communicator<decltype(&ncclCommDestroy)>(ApiFunction::ncclCommDestroy, comm);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return end_communicator<decltype(&ncclCommAbort)>(ApiFunction::ncclCommAbort, comm);
}

// The real library's text when it is there; ours when it cannot be opened.
JAX_MSCCLPP_NCCL_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  if (auto real_one = real_if_present<decltype(&ncclGetErrorString)>(ApiFunction::ncclGetErrorString)) {
    return real_one(result);
  }
  return result_description(result);
}

// This thread's last failure in this library when the latest call failed here; else the real library's last error.
// Neither call changes the last error.
JAX_MSCCLPP_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  const char* ours = last_error();
  if (ours[0] != '\0') return ours;
  if (auto real_one = real_if_present<decltype(&ncclGetLastError)>(ApiFunction::ncclGetLastError)) {
    return real_one(real_communicator(comm));
  }
  return ours;
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGroupStart(void) {
  if (!groups_go_to_real()) {
    clear_last_error();
    enter_group();
    return ncclSuccess;
  }
  const ncclResult_t result = forward_to_real<decltype(&ncclGroupStart)>(ApiFunction::ncclGroupStart);
  if (result == ncclSuccess) enter_group();
  return result;
}

// The outermost end launches what our runtime queued in the group (our_runtime.h), then the real library's.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGroupEnd(void) {
  leave_group();
  const ncclResult_t ours = group_depth() == 0 ? end_group() : ncclSuccess;
  if (!groups_go_to_real()) return ours;
  if (ours != ncclSuccess) {
    forward_to_real<decltype(&ncclGroupEnd)>(ApiFunction::ncclGroupEnd);
    return ours;
  }
  return forward_to_real<decltype(&ncclGroupEnd)>(ApiFunction::ncclGroupEnd);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  const ncclResult_t result =
      forward_to_real<decltype(&ncclGroupSimulateEnd)>(ApiFunction::ncclGroupSimulateEnd, simInfo);
  leave_group();
  return result;
}

#define JAX_MSCCLPP_NCCL_ALIAS_FORWARD(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_OPERATION(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_CUSTOM(return_type, name, parameters) \
  JAX_MSCCLPP_NCCL_ALIAS(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) \
  JAX_MSCCLPP_NCCL_ALIAS_##kind(return_type, name, parameters)
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
