// The windows of a communicator of ours (ncclCommWindowRegister) and the calls they let run in place.
//
// Contracts:
//   - add() is collective, as NCCL's window registration is: every rank registers one range, in the same order
//     on every rank. Two rounds of the bootstrap: every rank's memory handle of its range (runtime/gpu/memory.h),
//     then whether it mapped every peer's. A window is mapped when every rank mapped every other's (ranks of one
//     process directly; of another, through CUDA IPC, which exports cudaMalloc's memory and not cuMem's), the same
//     answer on every rank; an unmapped window is a range recorded only, as a buffer registration is.
//     Throws (a bootstrap round's timeout naming the ranks missing) when a rank does not register.
//   - in_place() finds the buffers of a call in mapped windows: the input's and the output's bytes each inside one
//     window, within the least of every rank's size of it. The peers' buffers are taken at the same offsets in
//     their windows: NCCL's rule for a call on windows, that every rank passes buffers at the same offsets (a rank
//     that does not runs another call: its peers fail as the call check says, or at the timeout).
//   - remove() unmaps the peers' ranges after the device finished its work (a kernel in flight may still use
//     them); local to the rank.
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
  bool mapped = false;
  std::vector<cuda::MappedMemory> mappings;  // by rank (this rank's own entry empty)
  std::vector<char*> ranges;                 // every rank's range as mapped here, by rank
};

class Windows {
 public:
  Window* add(BootstrapClient& bootstrap, int device, void* buffer, size_t bytes);
  void remove(Window* window);
  // Every rank's input and output of a call of `in_bytes` in and `out_bytes` out, when both lie in mapped windows.
  bool in_place(const void* in, size_t in_bytes, const void* out, size_t out_bytes, int nranks,
                InPlaceBuffers* buffers) const;

 private:
  const Window* holding(const void* p, size_t bytes) const;
  std::vector<std::unique_ptr<Window>> windows_;
};

}  // namespace jax_mscclpp::nccl
