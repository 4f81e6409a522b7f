// The NCCL API as this library exports it: types, codes and functions with the ABI of NCCL 2.30.7 (the release
// jax 0.11's XLA is built against; its ncclConfig_t version is 23007). Values of every enumerator, the size of
// ncclUniqueId and the order of ncclConfig_t's members are the ABI: they must equal the real library's.
//
// CUDA's types are declared opaquely (a stream is a pointer to CUDA's opaque stream struct), so this header and
// the library need no CUDA headers. Of the device API's types that the exported host functions take (NCCL's
// nccl_device/*.h), those passed by value (ncclTeam_t, ncclMultimemHandle_t) and the one this library fills for a
// communicator of its runtime alone (ncclCommProperties_t) are complete, with NCCL's layout; the others are
// incomplete here: this library only passes pointers to them through.
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JAX_MSCCLPP_NCCL_HEADER_MAJOR 2
#define JAX_MSCCLPP_NCCL_HEADER_MINOR 30
#define JAX_MSCCLPP_NCCL_HEADER_PATCH 7
// NCCL's version code for releases after 2.8: major * 10000 + minor * 100 + patch.
#define JAX_MSCCLPP_NCCL_HEADER_VERSION_CODE                                                      \
  (JAX_MSCCLPP_NCCL_HEADER_MAJOR * 10000 + JAX_MSCCLPP_NCCL_HEADER_MINOR * 100 + \
   JAX_MSCCLPP_NCCL_HEADER_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st* cudaStream_t;

typedef struct ncclComm* ncclComm_t;
// ncclCommSplit's color of a rank that joins no new communicator.
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
typedef struct ncclWindow_vidmem* ncclWindow_t;
// ncclCommWindowRegister's winFlags: NCCL_WIN_COLL_SYMMETRIC promises that every rank registers its window and
// passes a collective's buffers at the same offsets in it.
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02
typedef struct ncclParamHandle* ncclParamHandle_t;
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;
typedef struct ncclGinOutboxHandle ncclGinOutboxHandle_t;
typedef struct ncclGinInboxA2AHandle ncclGinInboxA2AHandle_t;

// The magic word of NCCL's versioned structs (ncclConfig_t, ncclCommProperties_t, ...).
#define JAX_MSCCLPP_NCCL_API_MAGIC 0xcafebeefu

// A set of ranks of a communicator: ranks rank - k * stride .. of nRanks, this rank being `rank`.
typedef struct ncclTeam {
  int nRanks;
  int rank;
  int stride;
} ncclTeam_t;

// A team's multicast memory (NVLink SHARP): the base of its multicast mapping.
typedef struct ncclMultimemHandle {
  void* mcBasePtr;
} ncclMultimemHandle_t;

// Which GPU-initiated networking a communicator has (ncclCommProperties_t).
typedef enum {
  NCCL_GIN_TYPE_NONE = 0,
  NCCL_GIN_TYPE_PROXY = 2,
  NCCL_GIN_TYPE_GDAKI = 3,
  NCCL_GIN_TYPE_GPI = 4
} ncclGinType_t;

// What ncclCommQueryProperties reports, versioned like ncclConfig_t: callers set size, magic and version
// (NCCL_COMM_PROPERTIES_INITIALIZER); hostRmaSupport, ginType, railedGinType and nLsaTeams are reported to callers
// of versions after 2.29.3.
typedef struct ncclCommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  ncclGinType_t ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  ncclGinType_t railedGinType;
} ncclCommProperties_t;

// The id that ncclGetUniqueId makes on one rank and every rank of the new communicator passes to its init.
enum { kNcclUniqueIdBytes = 128 };
typedef struct {
  char internal[kNcclUniqueIdBytes];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
  ncclNumResults = 9
} ncclResult_t;

// Built-in reductions; values from ncclNumOps up are operators made by ncclRedOpCreatePreMulSum. The enum has the
// size of an int.
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = INT_MAX
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

// Where the scalar of ncclRedOpCreatePreMulSum lives: read on the device while the collective runs, or read on the
// host before the call returns.
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

typedef enum {
  ncclStatGpuMemSuspend = 0,
  ncclStatGpuMemSuspended = 1,
  ncclStatGpuMemPersist = 2,
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;

// Communicator configuration, versioned by its first three members: callers fill `size` with sizeof, `magic` with
// the API magic and `version` with the version code of the header they were built with, and leave what they do
// not set at the "undefined" values below. The real library reads only the members that its version and `size`
// say are there, so a config passes through this library unread and unchanged.
#define JAX_MSCCLPP_NCCL_CONFIG_MAGIC JAX_MSCCLPP_NCCL_API_MAGIC
#define JAX_MSCCLPP_NCCL_CONFIG_UNDEFINED_INT INT_MIN
#define JAX_MSCCLPP_NCCL_SPLIT_NO_COLOR (-1)
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  int graphUsageMode;
  int numRmaCtx;
  int maxP2pPeers;
  int graphStreamOrdering;
} ncclConfig_t;

// What ncclGroupSimulateEnd reports, versioned like ncclConfig_t.
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

// One wait of ncclWaitSignal: opCnt signals from `peer` on signal index sigIdx of context ctx.
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

// Every function, and its profiling alias p<name> (api_functions.def lists them).
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) \
  return_type name parameters;                                                    \
  return_type p##name parameters;
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION

#ifdef __cplusplus
}
#endif
