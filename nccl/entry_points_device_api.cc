// The DEVICE_API rows of api_functions.def, and their p<name> aliases: host functions of NCCL's device API.
//
// NVIDIA's communicators and windows, and ours with a real communicator beside, go to NVIDIA's library
// (forwarding.h). A communicator or window of our runtime alone has no device API (no symmetric memory, multimem
// or GPU-initiated networking: our kernels copy through their own scratch) and is answered as NCCL 2.30.7 answers
// for a communicator without it (its dev_runtime.cc and nccl_device/core.cc):
//   - ncclCommQueryProperties: ncclSuccess with rank, nRanks and cudaDev, nvmlDev -1 (this library has no NVML),
//     and every feature off (deviceApiSupport, multimemSupport and hostRmaSupport false, ginType and railedGinType
//     NCCL_GIN_TYPE_NONE, nLsaTeams 0). Its arguments are checked as NCCL checks them: props NULL is
//     ncclInvalidArgument; props not made by NCCL_COMM_PROPERTIES_INITIALIZER (its magic), or of a version NCCL
//     2.30.7 cannot serve, ncclInvalidUsage; a communicator whose init has not completed ncclInvalidArgument, one
//     whose init failed that failure.
//   - Teams: ncclTeamWorld is the world {nRanks, rank, 1}; ncclTeamLsa and ncclTeamRail the empty team {0, 0, 0}
//     that NCCL returns where its device runtime cannot start; ncclTeamRankToWorld is NCCL's arithmetic;
//     ncclTeamRankToLsa is -1.
//   - A window's device pointers: the multimem ones (ncclGetLsaMultimemDevicePointer, ncclGetMultimemDevicePointer)
//     ncclSuccess with a null pointer (no multimem); ncclGetLsaDevicePointer ncclInvalidArgument (no rank is in the
//     empty load-store team); ncclGetPeerDevicePointer a null pointer (the peer cannot be reached by loads and
//     stores) for a rank of the communicator and ncclInvalidArgument for another. A NULL window or outPtr is
//     ncclInvalidArgument, and so is a multimem handle without a base, as NCCL's checks make them.
// A failure's last error names the function and the argument.
#include <string>

#include "forwarding.h"
#include "guarded.h"
#include "our_runtime.h"
#include "registrations.h"

#define JAX_MSCCLPP_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

using namespace jax_mscclpp::nccl;

namespace {

// The ncclCommProperties_t versions NCCL 2.30.7 serves (its devCommCompat table): [first, last] each.
constexpr struct {
  unsigned int first, last;
} kServedPropertiesVersions[] = {{22902, 22903}, {22905, 22907}, {23000, JAX_MSCCLPP_NCCL_HEADER_VERSION_CODE}};
// Versions after this one report hostRmaSupport, ginType, railedGinType and nLsaTeams.
constexpr unsigned int kPropertiesWithoutGinUpTo = 22903;

bool served_properties_version(unsigned int version) {
  for (const auto& range : kServedPropertiesVersions)
    if (version >= range.first && version <= range.last) return true;
  return false;
}

ncclResult_t invalid(ncclResult_t code, const char* function, const std::string& why) {
  return fail(code, std::string(function) + ": " + why);
}

// A window of our runtime alone (no real window beside): the device API's calls on it are answered here.
const RegisteredRange* window_alone(ncclWindow_t window) {
  const RegisteredRange* range = registered_range(window);
  return range != nullptr && range->real == nullptr ? range : nullptr;
}

// The checks every window call of NCCL's makes first: ncclSuccess, or ncclInvalidArgument naming the argument.
ncclResult_t check_window_call(const char* function, ncclWindow_t window, void** outPtr) {
  if (window == nullptr) return invalid(ncclInvalidArgument, function, "window is NULL");
  if (outPtr == nullptr) return invalid(ncclInvalidArgument, function, "outPtr is NULL");
  return ncclSuccess;
}

// The properties of a communicator of our runtime alone (see above), into `props` as far as its version has them.
ncclResult_t properties_of_runtime_alone(OurCommunicator* ours, ncclCommProperties_t* props) {
  constexpr const char* kFunction = "ncclCommQueryProperties";
  if (props->magic != JAX_MSCCLPP_NCCL_API_MAGIC)
    return invalid(ncclInvalidUsage, kFunction, "props was not initialized by NCCL_COMM_PROPERTIES_INITIALIZER");
  if (!served_properties_version(props->version))
    return invalid(ncclInvalidUsage, kFunction,
                   "props->version " + std::to_string(props->version) + " is not one NCCL " +
                       std::to_string(JAX_MSCCLPP_NCCL_HEADER_VERSION_CODE) + " serves");
  props->rank = runtime_rank(ours);
  props->nRanks = runtime_nranks(ours);
  props->cudaDev = runtime_device(ours);
  props->nvmlDev = -1;
  props->deviceApiSupport = false;
  props->multimemSupport = false;
  if (props->version > kPropertiesWithoutGinUpTo) {
    props->hostRmaSupport = false;
    props->ginType = NCCL_GIN_TYPE_NONE;
    props->railedGinType = NCCL_GIN_TYPE_NONE;
    props->nLsaTeams = 0;
  }
  clear_last_error();
  return ncclSuccess;
}

}  // namespace

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t* props) {
  return guarded("ncclCommQueryProperties", [&] {
    // The state first: a setup running elsewhere publishes `real` and `runtime` with it (our_communicator.h).
    if (OurCommunicator* ours = our_communicator(comm);
        ours != nullptr && (setup_state(ours) != ncclSuccess || ours->real == nullptr)) {
      if (props == nullptr) return invalid(ncclInvalidArgument, "ncclCommQueryProperties", "props is NULL");
      const ncclResult_t state = setup_state(ours);
      if (state == ncclInProgress)
        return invalid(ncclInvalidArgument, "ncclCommQueryProperties",
                       "the communicator's init has not completed (ncclCommGetAsyncError says when)");
      if (state != ncclSuccess) return fail(state, "ncclCommQueryProperties: the communicator's init failed: " +
                                                       ours->setup_error);
      if (ours->runtime != nullptr) return properties_of_runtime_alone(ours, props);
    }
    return forward_to_real<decltype(&ncclCommQueryProperties)>(ApiFunction::ncclCommQueryProperties, comm, props);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
  return guarded_value("ncclTeamWorld", ncclTeam_t{}, [&] {
    if (const OurCommunicator* ours = runtime_only(comm)) return ncclTeam_t{runtime_nranks(ours), runtime_rank(ours), 1};
    return forward_to_real<decltype(&ncclTeamWorld)>(ApiFunction::ncclTeamWorld, comm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
  return guarded_value("ncclTeamLsa", ncclTeam_t{}, [&] {
    if (runtime_only(comm) != nullptr) return ncclTeam_t{};
    return forward_to_real<decltype(&ncclTeamLsa)>(ApiFunction::ncclTeamLsa, comm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclTeam_t ncclTeamRail(ncclComm_t comm) {
  return guarded_value("ncclTeamRail", ncclTeam_t{}, [&] {
    if (runtime_only(comm) != nullptr) return ncclTeam_t{};
    return forward_to_real<decltype(&ncclTeamRail)>(ApiFunction::ncclTeamRail, comm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  return guarded_value("ncclTeamRankToWorld", -1, [&] {
    if (const OurCommunicator* ours = runtime_only(comm)) return runtime_rank(ours) + (rank - team.rank) * team.stride;
    return forward_to_real<decltype(&ncclTeamRankToWorld)>(ApiFunction::ncclTeamRankToWorld, comm, team, rank);
  });
}

JAX_MSCCLPP_NCCL_EXPORT int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  return guarded_value("ncclTeamRankToLsa", -1, [&] {
    if (runtime_only(comm) != nullptr) return -1;
    return forward_to_real<decltype(&ncclTeamRankToLsa)>(ApiFunction::ncclTeamRankToLsa, comm, team, rank);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                                                     void** outPtr) {
  return guarded("ncclGetLsaMultimemDevicePointer", [&] {
    if (window_alone(window) != nullptr) {
      if (const ncclResult_t checked = check_window_call("ncclGetLsaMultimemDevicePointer", window, outPtr);
          checked != ncclSuccess)
        return checked;
      *outPtr = nullptr;
      clear_last_error();
      return ncclSuccess;
    }
    return forward_to_real<decltype(&ncclGetLsaMultimemDevicePointer)>(ApiFunction::ncclGetLsaMultimemDevicePointer,
                                                                       window, offset, outPtr);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                                                  ncclMultimemHandle_t multimem, void** outPtr) {
  return guarded("ncclGetMultimemDevicePointer", [&] {
    if (window_alone(window) != nullptr) {
      if (const ncclResult_t checked = check_window_call("ncclGetMultimemDevicePointer", window, outPtr);
          checked != ncclSuccess)
        return checked;
      if (multimem.mcBasePtr == nullptr)
        return invalid(ncclInvalidArgument, "ncclGetMultimemDevicePointer", "multimem.mcBasePtr is NULL");
      *outPtr = nullptr;
      clear_last_error();
      return ncclSuccess;
    }
    return forward_to_real<decltype(&ncclGetMultimemDevicePointer)>(ApiFunction::ncclGetMultimemDevicePointer,
                                                                    window, offset, multimem, outPtr);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                                             void** outPtr) {
  return guarded("ncclGetLsaDevicePointer", [&] {
    if (window_alone(window) != nullptr) {
      if (const ncclResult_t checked = check_window_call("ncclGetLsaDevicePointer", window, outPtr);
          checked != ncclSuccess)
        return checked;
      return invalid(ncclInvalidArgument, "ncclGetLsaDevicePointer",
                     "lsaRank " + std::to_string(lsaRank) +
                         " is outside the window's load-store team, which is empty: the window is one of a "
                         "communicator of jax_mscclpp's runtime alone, without NCCL's device API");
    }
    return forward_to_real<decltype(&ncclGetLsaDevicePointer)>(ApiFunction::ncclGetLsaDevicePointer, window, offset,
                                                               lsaRank, outPtr);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                                              void** outPtr) {
  return guarded("ncclGetPeerDevicePointer", [&] {
    if (const RegisteredRange* range = window_alone(window)) {
      if (const ncclResult_t checked = check_window_call("ncclGetPeerDevicePointer", window, outPtr);
          checked != ncclSuccess)
        return checked;
      if (peer < 0 || peer >= range->nranks)
        return invalid(ncclInvalidArgument, "ncclGetPeerDevicePointer",
                       "peer " + std::to_string(peer) + " is not a rank of the window's " +
                           std::to_string(range->nranks) + "-rank communicator");
      *outPtr = nullptr;
      clear_last_error();
      return ncclSuccess;
    }
    return forward_to_real<decltype(&ncclGetPeerDevicePointer)>(ApiFunction::ncclGetPeerDevicePointer, window, offset,
                                                                peer, outPtr);
  });
}

#define JAX_MSCCLPP_NCCL_ALIAS_FORWARD(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_OPERATION(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_CUSTOM(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_DEVICE_API(return_type, name, parameters) \
  JAX_MSCCLPP_NCCL_ALIAS(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) \
  JAX_MSCCLPP_NCCL_ALIAS_##kind(return_type, name, parameters)
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
