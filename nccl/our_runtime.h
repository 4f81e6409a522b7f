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
//   - submit: an operation on one of our communicators with a runtime (operations.cc says which of ours runs it:
//     a collective kernel, point-to-point messages, or a composition of both, compositions.h). Outside a group it
//     is launched at once; inside one (group_depth.h) it is queued, and the outermost ncclGroupEnd launches the
//     calling thread's queue (end_group): the collectives in order, then each communicator's sends and receives as
//     one point-to-point group (collective.h, launch_p2p_group). Returns false when our runtime does not run it
//     (the caller forwards it), true with *result set otherwise.
//   - Every result other than ncclSuccess comes with this thread's last error (last_error.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "api_function.h"
#include "jax_mscclpp_nccl/nccl_api.h"
#include "our_communicator.h"

namespace jax_mscclpp::nccl {

// One communication call as NCCL's API describes it. `count` is NCCL's: elements per rank for all-reduce,
// all-gather (sendcount), reduce-scatter (recvcount), all-to-all (per peer), broadcast, reduce, gather and scatter
// (per rank), send and recv. `root`: the root rank of broadcast, reduce, gather and scatter; `peer`: the other rank
// of send and recv.
struct Operation {
  ApiFunction function;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int peer;
  int root;
  cudaStream_t stream;
};

bool our_runtime_enabled();
ncclResult_t make_our_unique_id(ncclUniqueId* id);
bool is_our_unique_id(const ncclUniqueId& id);
ncclResult_t init_our_communicator(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                                   ncclConfig_t* config);
// ncclCommSplit of one of ours with a runtime: collective over the parent's ranks. Inside a group (as
// shrink_our_communicator): *newcomm is null until the outermost ncclGroupEnd makes it (run_group_children).
ncclResult_t split_our_communicator(OurCommunicator* parent, int color, int key, ncclComm_t* newcomm,
                                    ncclConfig_t* config);
// The splits and shrinks of the calling thread's group, as outside it: concurrently by parent (one thread may split
// several ranks of one parent), in call order within a parent. ncclSuccess, ncclInProgress where a child is
// non-blocking, or the first failure (with its last error). ncclGroupSimulateEnd drops them (discard_group_children:
// no child is made, *newcomm stays null).
ncclResult_t run_group_children();
void discard_group_children();
// ---- lifecycle (runtime/our_runtime.cc; the setup itself: runtime/communicator_setup.h) ----
// init_our_communicator, by where it is called: outside a group with a blocking config (or none), the setup runs
// on the calling thread and *comm is set on success only; with config->blocking == 0, *comm is set at once, the
// setup runs on a thread of its own and the result is ncclInProgress (ncclCommGetAsyncError says ncclInProgress
// until it ends, then its result); inside a group, *comm is set at once and the setup waits for the outermost
// ncclGroupEnd, run_group_setups.
// The calling thread's inits of its group, concurrently (one thread may init several ranks): ncclSuccess, or the
// first failure (with its last error); ncclInProgress when one of them is non-blocking (then all go on in the
// background).
ncclResult_t run_group_setups();
// ncclGroupSimulateEnd: the calling thread's inits of its group are not made; their communicators report
// ncclInvalidUsage (async error and last error) and are still to be destroyed.
void discard_group_setups();
// ncclCommShrink of one of ours with a runtime: collective over the ranks that are not in `exclude` (NCCL's: the
// excluded ones do not call, and may be gone; one that calls gets a null communicator at once). The first survivor
// starts the child's root and delivers its id to the others' mailboxes (runtime/mailbox.h); each survivor then
// inits the child with its rank among the survivors, within the timeout. `flags` NCCL_SHRINK_ABORT stops the
// parent's kernels first (as ncclCommAbort does) and waits for the device to pass them.
ncclResult_t shrink_our_communicator(OurCommunicator* parent, const int* exclude, int count, ncclComm_t* newcomm,
                                     ncclConfig_t* config, int flags);
// Before a communicator of ours is ended: true when its setup still runs elsewhere (it is interrupted, and frees all
// it makes when it ends: the handle is not to be used again), false when the caller ends it as any other.
bool release_pending_setup(OurCommunicator* ours);
// The record of the runtime's failed kernel (runtime_failed), "" when none failed.
std::string runtime_failure(const OurCommunicator* ours);
// ncclMemAlloc / ncclMemFree while our runtime is on (runtime/buffers.cc): device memory from cuMem (exportable as a
// POSIX file descriptor, as NVIDIA's ncclMemAlloc makes it), cudaMalloc where the driver lacks it. owns_buffer: the
// pointer is one allocate_buffer returned and free_buffer has not freed.
ncclResult_t allocate_buffer(void** ptr, size_t size);
bool owns_buffer(void* ptr);
ncclResult_t free_buffer(void* ptr);
// ncclCommWindowRegister / ncclCommWindowDeregister on one of ours with a runtime (runtime/windows.h): the
// registration is collective, and a window every rank registered with NCCL_WIN_COLL_SYMMETRIC (`flags`, winFlags)
// and every rank maps serves the calls whose buffers lie in it in place (collective.h, launch_in_place); *window
// becomes the runtime's record of it. Outside a group it is made at once
// and fails (ncclSystemError, with the last error) when a rank does not register within the timeout; inside one,
// *window stays null until the outermost ncclGroupEnd makes the calling thread's registrations, concurrently (one
// thread may register the windows of several ranks: run_group_windows, whose result is the first failure), and
// ncclGroupSimulateEnd drops them (discard_group_windows: the windows stay ranges recorded only). *window must stay
// valid until then.
ncclResult_t register_window(OurCommunicator* ours, void* buffer, size_t bytes, int flags, void** window);
// ncclCommRegister / ncclCommDeregister on one of ours with a runtime: the range, local to the rank, lets the calls
// whose input and output lie in registered ranges run in place on them (runtime/windows.h, routing.h).
void register_buffer(OurCommunicator* ours, const void* buffer, size_t bytes);
// What the rank's calls between processes did on registered buffers (runtime/gpu/allocation_exchange.h): how many
// ran in place and how many copied through scratch; returns why none may ("" where they may).
std::string in_place_between_processes(const OurCommunicator* ours, uint64_t* in_place, uint64_t* through_scratch);
void deregister_buffer(OurCommunicator* ours, const void* buffer, size_t bytes);
ncclResult_t run_group_windows();
void discard_group_windows();
void deregister_window(OurCommunicator* ours, void* window);
bool submit(ncclComm_t comm, const Operation& operation, ncclResult_t* result);
ncclResult_t end_group();
// Drops the calling thread's queue without launching it (ncclGroupSimulateEnd: nothing of the group runs).
void discard_group();
// The operations of the calling thread's queue, in order (operations.cc), and what ncclGroupSimulateEnd reports for
// them (group_estimate.cc): microseconds, a launch latency per call and its bytes at NVLink speed.
std::vector<Operation> queued_group();
float estimate_group_microseconds(const std::vector<Operation>& operations);
// ncclRedOpCreatePreMulSum / ncclRedOpDestroy on one of ours with a runtime and no real communicator (reduction
// ops of NVIDIA's communicators are NVIDIA's): the reduction our compositions run (reduction_table.h).
ncclResult_t create_premulsum(OurCommunicator* ours, ncclRedOp_t* op, void* scalar, ncclDataType_t dtype,
                              ncclScalarResidence_t residence);
ncclResult_t destroy_reduction(OurCommunicator* ours, ncclRedOp_t op);
// Frees the runtime side of `ours`. `orderly` (destroy, after the real communicator, if any, is gone): first waits
// until the work the rank launched has ended (its outstanding operations complete, within the kernel timeout: one
// event, recorded after the rank's latest call, that completes after all its calls on every stream:
// RuntimeCommunicator::wait_for_launched_work), then for every rank at the root, at most a couple of seconds; else
// (abort, before the real communicator's abort), or where the work did not end or a rank did not come, the rank's
// kernels are stopped from the host (every wait gives up at its next check, no trap) and the frees go to a thread
// of their own, so the call returns at once; a new communicator can be made right after.
void release_runtime(OurCommunicator* ours, bool orderly);
// Rank, world size and device of a communicator of ours with a runtime.
int runtime_rank(const OurCommunicator* ours);
int runtime_nranks(const OurCommunicator* ours);
// Whether a kernel of the runtime's rank failed and stopped (JAX_MSCCLPP_TRAP_ON_FAILURE=0): every later operation
// on the communicator is refused with ncclRemoteError and its record.
bool runtime_failed(const OurCommunicator* ours);
// A wait of the runtime's rank that passed the timeout and goes on (TimeoutPolicy::kWait, the library's default:
// runtime/timeout_policy.h): prints its one warning line to stderr, once per late report (taking the report re-arms
// it for the next late wait); nothing otherwise, and never a failure. Called where clients poll or call anyway:
// ncclCommGetAsyncError (whose answer stays ncclSuccess) and every operation's entry (submit). `ours` has a runtime
// whose setup completed.
void report_late_wait(const OurCommunicator* ours);
int runtime_device(const OurCommunicator* ours);
// "function algorithm count" lines: the calls our runtime ran, and those of our communicators it forwarded
// (algorithm "nccl").
std::string call_counts();

}  // namespace jax_mscclpp::nccl
