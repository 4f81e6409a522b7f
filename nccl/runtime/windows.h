// The windows of a communicator of ours (ncclCommWindowRegister) and the calls they let run in place.
//
// Contracts:
//   - add() is collective, as NCCL's window registration is: every rank registers one range, with its winFlags, in
//     the same order on every rank. The first round of the bootstrap carries every rank's size and flags, and its
//     memory handle of its range (runtime/gpu/memory.h) where the rank asked for a symmetric window. A window is
//     symmetric when every rank registered it with NCCL_WIN_COLL_SYMMETRIC, the same answer on every rank (all read
//     the same frames); only a symmetric one is mapped: a second round says whether each rank mapped every peer's
//     range (ranks of one process directly; of another, through CUDA IPC, which exports cudaMalloc's memory and not
//     cuMem's), and the window is mapped when every rank did. A window that is not mapped (a default one, flags
//     without NCCL_WIN_COLL_SYMMETRIC, or one some rank could not map) is a range recorded only, as a buffer
//     registration is: calls on it run as any other does. Throws (a bootstrap round's timeout naming the ranks
//     missing) when a rank does not register.
//   - in_place() finds the buffers of a call in mapped windows: the input's and the output's bytes each inside one
//     window, within the least of every rank's size of it. The peers' buffers are taken at the same offsets in
//     their windows: what NCCL_WIN_COLL_SYMMETRIC promises (a rank that breaks the promise runs another call: its
//     peers fail as the call check says, or at the timeout). Buffers in default windows are never taken in place,
//     since NCCL lets each rank pass them at any offset.
//   - remove() unmaps the peers' ranges after the device finished its work (a kernel in flight may still use
//     them); local to the rank.
//   - add_buffer() / remove_buffer() record the ranges of ncclCommRegister, local to the rank. NCCL requires that
//     where one rank passes registered buffers to a call every rank does, so registered() (the call's input and
//     output each inside one registered range or window) answers alike on every rank, and the call entry may run
//     such a call in place on the buffers where they are (runtime/gpu/call.h, CollectiveCall::peers_reach_buffers:
//     ranks of one process post them; ranks of several processes map their allocations and agree per call,
//     runtime/gpu/allocation_exchange.h).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "bootstrap.h"
#include "collectives/collective.h"
#include "memory.h"

namespace jax_mscclpp::nccl {

struct Window {
  char* buffer;                              // this rank's range
  size_t bytes;
  size_t reach = 0;                          // the least of every rank's size of this window
  bool symmetric = false;                    // every rank registered it with NCCL_WIN_COLL_SYMMETRIC
  bool mapped = false;                       // symmetric, and every rank mapped every other's range
  std::vector<cuda::MappedMemory> mappings;  // by rank (this rank's own entry empty)
  std::vector<char*> ranges;                 // every rank's range as mapped here, by rank
};

class Windows {
 public:
  // `flags`: ncclCommWindowRegister's winFlags.
  Window* add(BootstrapClient& bootstrap, int device, void* buffer, size_t bytes, int flags);
  void remove(Window* window);
  // Every rank's input and output of a call of `in_bytes` in and `out_bytes` out, when both lie in mapped windows.
  bool in_place(const void* in, size_t in_bytes, const void* out, size_t out_bytes, int nranks,
                InPlaceBuffers* buffers) const;
  void add_buffer(const void* buffer, size_t bytes);
  void remove_buffer(const void* buffer, size_t bytes);
  // The call's input and output each lie in one registered buffer or window of this rank.
  bool registered(const void* in, size_t in_bytes, const void* out, size_t out_bytes) const;

 private:
  const Window* holding(const void* p, size_t bytes) const;
  bool recorded(const void* p, size_t bytes) const;
  std::vector<std::unique_ptr<Window>> windows_;
  std::vector<std::pair<const char*, size_t>> buffers_;  // ncclCommRegister's ranges
};

}  // namespace jax_mscclpp::nccl
