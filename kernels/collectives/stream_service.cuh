// The service loop of a block's point-to-point streams: the grouped sends and receives (p2p_group.cu) and the
// ragged all-to-all (ragged_all_to_all.cu) both run it.
//
// A block owns `owned` streams, their states in shared memory. Each round, thread 0 sweeps them from the one after
// the last it served and picks the first whose next piece is ready (`block.ready(s)`); `prepare(s)` then readies
// that piece (reads a header, a posted address), and returns false when it cannot (the block stops). When nothing
// is ready, the first stream not done is the stalled one: the spin bound ticks on the wait `wait_of(s)` names, and
// restarts whenever a stream is served, so the timeout bounds the time without progress, not the call. The whole
// block then moves the picked piece (`block.move(s)`), and thread 0 publishes it and advances the stream
// (`block.publish_and_advance(s)`). The loop ends when every stream is done, or when a wait gives up or `prepare`
// fails (stop on failure); the caller then writes back what the next launch needs.
#pragma once

#include <cstdint>

#include "jax_mscclpp/error_record.cuh"

namespace jax_mscclpp {

// What a stalled stream waits for: the peer's site (for the record), the wait and the counter value it waits for.
struct StreamWait {
  WaitSite site;
  WaitOp op;
  uint64_t target;
};

template <class State, class Block, class Prepare, class WaitOf>
__device__ __forceinline__ void serve_streams(State* states, int owned, const Block& block, Prepare prepare,
                                              WaitOf wait_of) {
  constexpr int kNone = -1;  // nothing ready: poll again
  constexpr int kDone = -2;  // every stream of the block is done
  constexpr int kStop = -3;  // a wait gave up, or the communicator failed (stop on failure)
  __shared__ int pick;
  WaitSite site{};
  SpinBound bound(site);
  int next = 0;  // thread 0: where the next sweep starts
  for (;;) {
    if (threadIdx.x == 0) {
      int chosen = kDone, stalled = -1;
      for (int t = 0; t < owned; ++t) {
        const int i = (next + t) % owned;
        State& s = states[i];
        if (s.done) continue;
        if (block.ready(s)) {
          chosen = i;
          break;
        }
        if (stalled < 0) stalled = i;
        chosen = kNone;
      }
      if (chosen >= 0) {
        next = (chosen + 1) % owned;
        bound = SpinBound(site);
        if (!prepare(states[chosen])) chosen = kStop;
      } else if (chosen == kNone) {
        const State& s = states[stalled];
        const StreamWait wait = wait_of(s);
        site = wait.site;
        if (!bound.tick(wait.op, wait.target, s.seen)) chosen = kStop;
      }
      pick = chosen;
    }
    __syncthreads();
    const int i = pick;
    if (i == kDone || i == kStop) break;
    if (i >= 0) block.move(states[i]);
    __syncthreads();
    if (i >= 0 && threadIdx.x == 0) block.publish_and_advance(states[i]);
  }
}

}  // namespace jax_mscclpp
