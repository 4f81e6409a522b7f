// Which of ours runs an NCCL operation on a communicator of ours, the rank's call that runs it, and in what launches a
// group runs: decisions made from the call's arguments, the communicator's shape and the selection table alone (no
// GPU), so that every rank decides alike for the same call; the rank's call adds what only the rank knows (its
// windows). operations.cc acts on them; tests read them without a GPU.
//
// route() decodes the operation once (operation.h) and carries the decoded form in the route: the rank's call and
// the compositions read it from there.
//
// A route is one of:
//   kCollective    a collective kernel of every rank (collective.h), the algorithm the selection table gives
//                  (selection.h: runtime/select beneath the tuning file), where our kernels run the (dtype,
//                  reduction);
//   kPointToPoint  a send or receive: point-to-point messages (collective.h, launch_p2p_group), unless the table
//                  gives the size to NVIDIA's NCCL, it serves the communicator and that has several ranks;
//   kComposed      what no kernel runs (broadcast, reduce, gather, scatter; prod, avg, pre-multiplied sums and the
//                  8-bit floats) on a communicator NVIDIA's NCCL does not serve, and every collective on a
//                  communicator of one rank (a copy; a PreMulSum the fold of one block): compositions.h, with
//                  `fold` for the reductions that fold;
//   kForward       NVIDIA's NCCL, where it serves the communicator;
//   kRefuse        an error the caller returns (`refusal`, `reason`): bad arguments, or nothing can run it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "call.h"
#include "collectives/collective.h"
#include "collectives/fold.h"
#include "operation.h"
#include "our_runtime.h"
#include "reduction_table.h"
#include "select/rules.h"
#include "windows.h"

namespace jax_mscclpp::nccl {

// How a composed reduction folds (kernels/collectives/fold.h).
struct Fold {
  FoldElement element;
  FoldOp op;
  FoldScalar scalar;  // kPreMulSum's factor
};

struct Route {
  enum Kind { kForward, kRefuse, kCollective, kPointToPoint, kComposed } kind = kForward;
  DecodedOperation decoded{};  // the operation as our kernels take it (operation.h)
  int32_t algorithm = -1;      // kCollective
  std::optional<Fold> fold;  // kComposed reductions
  ncclResult_t refusal = ncclSuccess;
  std::string reason;  // kRefuse
};

// What a route depends on besides the call.
struct RouteContext {
  int nranks;
  bool nccl_can_run;  // NVIDIA's NCCL holds a communicator for these ranks
  bool shares_gpu;    // two ranks drive one GPU
  const std::vector<select::Rule>& tuned;  // the tuning file's rules in force (selection.h)
  const ReductionTable& reductions;
};

Route route(const RouteContext& context, const Operation& op);

// Where the rank's call of an operation runs: the rank, the communicator's size, the grid cap of the streaming and
// in-place kernels (the same on every rank), and the communicator's windows (windows.h).
struct CallPlace {
  int rank;
  int nranks;
  int32_t max_blocks;
  const Windows& windows;
};

// The rank's call (runtime/gpu/call.h, for GpuRank::run) of a kCollective route, made when it is launched (a window
// registered in the same group serves it): an InPlaceCall over every rank's buffers at the same offsets in their
// windows where the input and the output lie in windows every rank mapped, laid out as NCCL defines in-place calls
// or apart, and launch_in_place runs the (collective, dtype, op); else a CollectiveCall of the route's algorithm on
// the operation's buffers, which the peers reach where they are (peers_reach_buffers) only where both lie in
// registered buffers or windows (ncclCommRegister: NCCL requires every rank's to be, windows.h) laid out as NCCL
// allows.
cuda::Call collective_call(const Route& route, const Operation& op, const CallPlace& place);
// This rank's message of a kPointToPoint route (collective.h, launch_p2p_group): a send reads op.send, a receive
// writes op.recv, one block each.
P2PMessage point_to_point_message(const Route& route, const Operation& op);

// One launch of a group: the queue's operations it runs (indices into the queue).
struct GroupLaunch {
  bool point_to_point;
  std::vector<size_t> operations;
};
// The launches of a group whose queue holds, per operation, its communicator and whether it is point-to-point: every
// other operation alone, in queue order (as every rank issues them); then, per communicator in the order of its
// first point-to-point operation, all of them as one launch, in queue order (NCCL's order per peer).
std::vector<GroupLaunch> plan_group(const std::vector<std::pair<const void*, bool>>& queue);

}  // namespace jax_mscclpp::nccl
