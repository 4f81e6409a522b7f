// HostMemoryChannel: the reference backend's MemoryChannel, one direction of a pair of ranks in one group.
//
// put() copies into the peer's registered scratch (never into a buffer XLA owns); signal() publishes every put
// issued before it (release); wait() returns once the peer's matching signal arrived (acquire), counting
// signals in order: the k-th wait on a channel matches the peer's k-th signal to me.
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

  void put(size_t dst_offset, const void* src, size_t bytes) const {
    if (bytes) std::memcpy(peer_scratch + dst_offset, src, bytes);
  }
  void signal() const { peer_inbound->count.fetch_add(1, std::memory_order_release); }
  bool wait(Clock::time_point deadline) const {
    return wait_until_at_least(*my_inbound, ++*expected, deadline);
  }
  // As wait(), asking `stop()` now and then whether to give up early. The signal counts as consumed whatever the
  // result: after a failed wait the group is out of step and unusable (host_communicator.h).
  template <class Stop>
  WaitResult wait(Clock::time_point deadline, Stop&& stop) const {
    return wait_until_at_least(*my_inbound, ++*expected, deadline, stop);
  }
};

}  // namespace jax_mscclpp::host
