// One call on a GPU rank, as both frontends decode it: the XLA handlers (ffi/cuda/handlers_cuda.cc) from XLA's
// buffers and attributes, the NCCL library (nccl/runtime/routing.h, compositions.h) from an NCCL operation. Each
// decodes its arguments into a Call once and hands it to GpuRank::run (communicator.h), which refuses it, launches
// it and poisons its outputs in one place (docs/architecture.md, "One call entry").
//
// Contracts of GpuRank::run(call, stream):
//   - Refusal first: a rank whose kernel failed and stopped (RankOptions::stop_on_failure) refuses every later call,
//     kRefused, with the failure's record in one wording (CallResult::message), and launches nothing. The record's
//     kind says why: out of step (mismatched calls, or a peer that failed the communicator) or a wait that timed
//     out; the frontends code it as theirs (XLA: ABORTED / DEADLINE_EXCEEDED; NCCL: ncclRemoteError).
//   - Then the launch on `stream` (collectives/collective.h, executor/executor.h, collectives/epilogue.h): the
//     launch's cudaError_t is kept in CallResult::error with a message that says what the code means there. A
//     CollectiveCall whose buffers the peers may reach runs the algorithm direct_algorithm gives (collective.h): in
//     place on the buffers the ranks post, where they are all of one process and the asked algorithm would stream
//     through scratch.
//   - Where the rank's failing kernels stop rather than trap, the call's kernels poison every output the call
//     writes should the rank have failed by their end (collective.h, FailedOutputs; fold.h for a fold), so that a
//     failed call's outputs cannot pass for results. No launch is added for it: a call enqueues its own kernels
//     only (one per piece of the call, collective.h), a device copy where it moves bytes within the rank, and a
//     memset where a permutation's plan leaves a rank's output to zeros (CollectiveCall::receives_nothing).
//   - In issue order across streams: a call on a stream other than the rank's previous call's waits for it on the
//     device first (issue_order.h), as NCCL orders a communicator's operations: an eager call for the previous
//     eager call, a captured one for the previous call of its capture. The event that records a call's end is
//     recorded after a failed launch too, so GpuRank::issued_work covers whatever of it was enqueued.
//   - Capture-safe, as the launches are: the only host state per call is where the previous call was issued, and
//     a wait between calls is made only inside one capture (issue_order.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "collectives/collective.h"
#include "collectives/epilogue.h"
#include "collectives/fold.h"
#include "failure_kind.h"

namespace jax_mscclpp::cuda {

// A collective kernel of every rank (codes.def's collective and algorithm codes), or with algorithm kPlan the
// execution plan bound to the rank as plan_id (GpuRank::bind_plan). Buffers as collective.h's block layout says;
// for a plan, `in` holds the plan's input blocks of block_count elements and `out` its output blocks.
struct CollectiveCall {
  int32_t collective;
  int32_t algorithm;
  const void* in;
  void* out;
  uint64_t block_count;
  int32_t dtype;  // codes.def DType
  int32_t op;     // codes.def ReduceOp (ignored by the moves)
  int32_t max_blocks = 0;
  int64_t plan_id = 0;
  // The peers may read `in` and write `out` where they are, given their addresses (direct_algorithm): XLA's buffers
  // (the runtime enables peer access between the GPUs of its ranks, which covers XLA's allocations). A caller that
  // cannot promise it (the NCCL library: NCCL reaches only registered buffers) leaves it false.
  bool peers_reach_buffers = false;
  // A plan of the permutation (PLAN.md, "permutation") on a rank that is no pair's destination: its output is zeroed
  // before the plan runs, as lax.ppermute gives such a rank zeros (the plan writes nothing there).
  bool receives_nothing = false;
};

// The permutation (launch_permute): this rank's block to send_to, the block of recv_from into out.
struct PermuteCall {
  int32_t algorithm;
  const void* in;
  void* out;
  uint64_t block_count;
  int32_t dtype;
  int32_t send_to;
  int32_t recv_from;
  int32_t max_blocks = 0;
};

// This rank's point-to-point messages of one group (launch_p2p_group); the receives are its outputs.
struct PointToPointCall {
  const P2PMessage* messages;
  int count;
};

// An all-reduce with a fused epilogue (launch_all_reduce_epilogue): new_residual, and normed where it is not null,
// are its outputs.
struct FusedAllReduceCall {
  Epilogue kind;
  EpilogueCall call;
  int32_t dtype;
};

// A ragged all-to-all (launch_ragged_all_to_all): `output` is its output, written where the peers' rows land.
struct RaggedAllToAllCall {
  RaggedAllToAll ragged;
};

// A collective over buffers every rank reaches (launch_in_place): `buffers.out[rank]` is its output.
struct InPlaceCall {
  int32_t collective;
  InPlaceBuffers buffers;
  uint64_t block_count;
  int32_t dtype;  // codes.def DType
  int32_t op;     // codes.def ReduceOp (ignored by the moves)
  int32_t max_blocks = 0;
};

// A local fold of blocks in this rank's memory (collectives/fold.h, launch_fold_blocks: its operands aligned to the
// element): `out`, count elements, is its output. It waits for no peer; the NCCL library's compositions fold the
// blocks point-to-point groups brought (nccl/runtime/compositions.h).
struct FoldCall {
  const char* blocks;
  uint64_t block_stride;  // bytes
  int nblocks;
  char* out;
  uint64_t count;
  FoldElement element;
  FoldOp op;
  FoldScalar scalar;  // kPreMulSum's factor
  int divisor;        // kAvg's
};

using Call = std::variant<CollectiveCall, PermuteCall, PointToPointCall, FusedAllReduceCall, RaggedAllToAllCall,
                          InPlaceCall, FoldCall>;

enum class CallStatus {
  kLaunched,        // enqueued on the stream (its outputs poisoned should the rank fail by its end)
  kRefused,         // an earlier kernel of the rank failed and stopped: nothing was launched
  kPlanNotBound,    // a plan call whose plan_id is not bound to the rank
  kPlanMismatch,    // a plan call whose sizes do not fit the plan's blocks
  kLaunchFailed,    // the launch returned CallResult::error
};

struct CallResult {
  CallStatus status = CallStatus::kLaunched;
  cudaError_t error = cudaSuccess;  // kLaunchFailed: the launch's error
  // kRefused: why the rank failed (the record of its first failed kernel, error_record.cuh): kOutOfStep or kTimedOut
  FailureKind failure = FailureKind::kOutOfStep;
  std::string message;              // what happened, for the frontend's error (empty when launched)
  // A CollectiveCall launched in place on the buffers where they are (direct_algorithm between ranks of one process,
  // the allocation exchange between processes), not through scratch.
  bool in_place = false;
  bool launched() const { return status == CallStatus::kLaunched; }
};

// The launch's error as a CallResult (kLaunchFailed; kLaunched for cudaSuccess), `what` naming what was launched.
CallResult launch_result(cudaError_t error, const char* what);
// The same, what was launched named by `describe()`, called only where the launch failed: a launch that succeeds
// builds no message.
template <class Describe>
  requires std::is_invocable_r_v<std::string, Describe&>
CallResult launch_result(cudaError_t error, Describe&& describe) {
  if (error == cudaSuccess) return {};
  return launch_result(error, describe().c_str());
}

}  // namespace jax_mscclpp::cuda
