// HostMemoryChannel: the reference backend's MemoryChannel, one direction of a pair of ranks in one group.
//
// put() copies into the peer's registered scratch (never into a buffer XLA owns); signal() publishes every put
// issued before it (release) and rings the peer's doorbell; expect() and arrived() count signals in order: the k-th
// signal awaited on a channel is the peer's k-th signal to me. The waits themselves are the caller's, on its own
// doorbell (host_semaphore.h), which rings with any signal to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "host_semaphore.h"

namespace jax_mscclpp::host {

struct HostMemoryChannel {
  std::byte* peer_scratch = nullptr;       // the peer's registered scratch (both halves)
  HostSemaphore* peer_inbound = nullptr;   // the peer's semaphore counting my signals
  HostSemaphore* my_inbound = nullptr;     // my semaphore counting the peer's signals
  uint64_t* expected = nullptr;            // my count of the peer's signals consumed so far (mine alone)
  Doorbell* peer_doorbell = nullptr;       // the peer's, rung after each signal

  void put(size_t dst_offset, const void* src, size_t bytes) const {
    if (bytes) std::memcpy(peer_scratch + dst_offset, src, bytes);
  }
  void signal() const {
    peer_inbound->count.fetch_add(1, std::memory_order_release);
    peer_doorbell->ring();
  }
  // Counts the peer's next signal as awaited; arrived() says whether every awaited signal came (acquire). The
  // signal counts as consumed whatever happens next: after a failed wait the group is out of step and unusable
  // (host_communicator.h).
  void expect() const { ++*expected; }
  bool arrived() const { return my_inbound->count.load(std::memory_order_acquire) >= *expected; }
};

}  // namespace jax_mscclpp::host
