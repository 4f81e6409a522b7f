// What the entry points ask of our runtime (runtime/, built with the CUDA parts; without them, our_runtime_absent.cc
// answers that it is not there and every call goes to the real NCCL).
//
// Contracts:
//   - make_our_unique_id: a unique id of ours (runtime/unique_id.h), whose communicators our runtime sets up; only
//     while our_runtime_enabled() (built, and JAX_MSCCLPP_NCCL_RUNTIME is not 0).
//   - init_our_communicator: for an id of ours, the caller's rank of a communicator of ours. Where NVIDIA's NCCL can
//     run too (no two ranks on one GPU, and the real library opens), it holds a real communicator for the same
//     ranks, made through our bootstrap, for the operations ours leaves to it. Otherwise it has none, and a call
//     that needs one fails with ncclInvalidUsage naming it.
//   - submit: an operation on one of our communicators with a runtime. Outside a group it is launched at once;
//     inside one (group_depth.h) it is queued, and the outermost ncclGroupEnd launches the calling thread's queue
//     in order (end_group), a communicator's sends and receives as one permutation call. Returns false when our
//     runtime does not run it (the caller forwards it), true with *result set otherwise.
//   - Every result other than ncclSuccess comes with this thread's last error (last_error.h).
#pragma once

#include <cstddef>
#include <string>

#include "api_function.h"
#include "jax_mscclpp_nccl/nccl_api.h"
#include "our_communicator.h"

namespace jax_mscclpp::nccl {

// One communication call as NCCL's API describes it. `count` is NCCL's: elements per rank for all-reduce,
// all-gather (sendcount), reduce-scatter (recvcount), all-to-all (per peer), send and recv.
struct Operation {
  ApiFunction function;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int peer;
  cudaStream_t stream;
};

bool our_runtime_enabled();
ncclResult_t make_our_unique_id(ncclUniqueId* id);
bool is_our_unique_id(const ncclUniqueId& id);
ncclResult_t init_our_communicator(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                                   ncclConfig_t* config);
// ncclCommSplit of one of ours with a runtime: collective over the parent's ranks.
ncclResult_t split_our_communicator(OurCommunicator* parent, int color, int key, ncclComm_t* newcomm,
                                    ncclConfig_t* config);
bool submit(ncclComm_t comm, const Operation& operation, ncclResult_t* result);
ncclResult_t end_group();
// Frees the runtime side of `ours` (after the real communicator, if any, is gone). `orderly`: wait for every rank
// first (destroy), else not (abort).
void release_runtime(OurCommunicator* ours, bool orderly);
// Rank, world size and device of a communicator of ours with a runtime.
int runtime_rank(const OurCommunicator* ours);
int runtime_nranks(const OurCommunicator* ours);
// Whether a kernel of the runtime's rank failed and stopped (JAX_MSCCLPP_TRAP_ON_FAILURE=0): every later operation
// on the communicator is refused with ncclRemoteError and its record.
bool runtime_failed(const OurCommunicator* ours);
int runtime_device(const OurCommunicator* ours);
// "function algorithm count" lines: the calls our runtime ran, and those of our communicators it forwarded
// (algorithm "nccl").
std::string call_counts();

}  // namespace jax_mscclpp::nccl
