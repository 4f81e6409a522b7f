// Call checks on the GPU (docs/architecture.md, "Call checks"): ranks whose launches belong to different calls
// (another collective, op, dtype, size per block, algorithm, plan or epilogue) fail with an error record naming
// both calls, instead of returning a wrong answer or waiting out the time limit.
//
// Every launch carries its call's CallWords (call_inbox.cuh; set by the host per launch and constant per call
// site, so launches still replay). Protocol, for launch e (every block reads e alike):
//   start: block 0's thread q stores the launch's words into slot (rank, e & 1) of rank q's inbox (its own too),
//          each word tagged with uint32(e), so no fence and no ordering is needed;
//   end:   block 0's thread q (q != rank) reads slot (q, e & 1) of its own inbox until every tag says e, and
//          compares.
// The slot is written in time: every launch makes a rank's completion depend on data every peer sent in that
// launch (kernels/collectives/collective_common.cuh), so when a rank ends launch e every peer has started it and
// its stores are on their way; the wait is bounded like every other. The slot is not overwritten early: peer q
// writes it again in launch e + 2, which it starts only after launch e + 1 completed on it, which needs this
// rank's data of e + 1, sent after this rank ended e. So a tag past e means the peer is in a later launch than
// this one, which matching calls never are: a mismatch as well.
#pragma once

#include <cstdint>

#include "call_inbox.cuh"
#include "error_record.cuh"

namespace jax_mscclpp {

#if defined(__CUDACC__)

// Start of launch `epoch`: this rank's words into slot (rank, epoch & 1) of the inbox `inbox` (a peer's or its own).
JAX_MSCCLPP_DEVICE_INLINE void post_call(char* inbox, int rank, uint64_t epoch, const CallWords& w) {
  uint64_t* slot = call_slot(inbox, rank, epoch);
  const uint64_t tag = epoch << 32;
  asm volatile("st.relaxed.sys.v2.u64 [%0], {%1, %2};" ::"l"(slot), "l"(tag | w.call), "l"(tag | w.count)
               : "memory");
  asm volatile("st.relaxed.sys.v2.u64 [%0], {%1, %2};" ::"l"(slot + 2), "l"(tag | w.variant), "l"(tag) : "memory");
}

// Fills the rank's record for a mismatch with the site's peer (first caller only), then record_failure's end.
__device__ __noinline__ inline void call_mismatch(const WaitSite& site, uint64_t epoch, const CallWords& mine,
                                                  const CallWords& theirs, uint32_t theirs_epoch) {
  ErrorRecord r{};
  r.rank = site.rank;
  r.peer = site.peer;
  r.op = static_cast<uint32_t>(WaitOp::kCallMismatch);
  r.epoch = epoch;
  r.observed = theirs_epoch;
  r.mine = mine;
  r.theirs = theirs;
  r.mine_epoch = static_cast<uint32_t>(epoch);
  r.theirs_epoch = theirs_epoch;
  record_failure(site, r);
}

// End of launch `epoch`: waits (bounded) for peer `peer`'s words of this launch in this rank's inbox. When they
// differ from `mine`, `fail()` runs (it marks every rank's inbox failed: mark_failed, then a fence), then the rank
// records the mismatch and traps, or stops (record_failure).
template <class Fail>
JAX_MSCCLPP_DEVICE_INLINE void check_call(const char* inbox, int peer, uint64_t epoch, const CallWords& mine,
                                          const WaitSite& site, Fail&& fail) {
  const uint64_t* slot = call_slot(inbox, peer, epoch);
  const uint32_t want = static_cast<uint32_t>(epoch);
  SpinBound bound(site);
  for (;;) {
    const PostedCall p = read_slot(slot);
    bool ready = true, ahead = false;
    for (int i = 0; i < 3; ++i) {
      const int32_t lag = static_cast<int32_t>(p.tag[i] - want);
      ready = ready && lag == 0;
      ahead = ahead || lag > 0;
    }
    if (ready) {
      if (p.words.call != mine.call || p.words.count != mine.count || p.words.variant != mine.variant) {
        fail();
        call_mismatch(site, epoch, mine, p.words, want);
      }
      return;
    }
    if (ahead) {
      fail();
      call_mismatch(site, epoch, mine, p.words, p.tag[0]);
      return;
    }
    if (!bound.tick(WaitOp::kCallCheck, epoch, p.tag[0])) return;
  }
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
