#include "host_collectives.h"

#include <algorithm>
#include <cstring>

#include "host_reduce.h"
#include "message_text.h"

namespace jax_mscclpp::host {
namespace {

// One rank's view of one call: its channels, its scratch and the bookkeeping of rounds. The call publishes its
// signature for the epoch of its first round and checks every peer's at its first exchange (call_signature.h).
class RankCall {
 public:
  RankCall(HostCommunicator& comm, HostGroup& group, HostRankState& me, const CollectiveCall& call, double timeout_s)
      : comm_(comm), group_(group), me_(me), call_(call), timeout_s_(timeout_s),
        deadline_(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))),
        world_(comm.world_size()), elem_(dtype_size(call.dtype)), signature_(CallSignature::of(call, -1)),
        first_epoch_(me.epoch + 1) {
#if JAX_MSCCLPP_TESTING
    stop_after_exchanges_ = me.faults->stop_exchanges.exchange(-1, std::memory_order_relaxed);
#endif
    me_.published->publish(first_epoch_, signature_);
  }

  int world() const { return world_; }
  int rank() const { return me_.rank; }
  size_t elem() const { return elem_; }
  size_t half_bytes() const { return comm_.scratch_half_bytes(); }

  // Starts a round: advances the epoch and returns the byte offset of this round's scratch half.
  size_t begin_round() { return size_t(++me_.epoch & 1) * half_bytes(); }

  void put(int peer, size_t dst_offset, const void* src, size_t elems) {
    me_.channels[peer].put(dst_offset, src, elems * elem_);
  }
  const std::byte* my_scratch(size_t offset) const { return me_.scratch.get() + offset; }

  // Publishes this round's puts to every peer, then waits for every peer's: the end of a phase. The first
  // exchange of a call also checks that every peer is in the same call.
  bool exchange() {
#if JAX_MSCCLPP_TESTING
    if (exchanges_ == stop_after_exchanges_) return injected_stop();
#endif
    const bool first = exchanges_++ == 0;
    for (int p = 0; p < world_; ++p)
      if (p != me_.rank) me_.channels[p].signal();
    for (int p = 0; p < world_; ++p)
      if (p != me_.rank) me_.channels[p].expect();
    // Signals still missing: the rings the rank's doorbell must get at least before they can all be there.
    auto missing = [&] {
      uint32_t n = 0;
      for (int p = 0; p < world_; ++p) n += p != me_.rank && !me_.channels[p].arrived();
      return n;
    };
    const WaitResult result = wait_until(
        *me_.doorbell, missing, deadline_,
        [&] {
          return group_.broken.load(std::memory_order_acquire) || peer_in_another_call(first, nullptr, nullptr) >= 0;
        },
        wait_spin_for(comm_.num_partitions()));
    if (result == WaitResult::kTimedOut) return timed_out(first_missing());
    CallSignature other;
    uint64_t other_epoch = 0;
    const int peer = peer_in_another_call(first, &other, &other_epoch);
    if (peer >= 0) return mismatch(peer, other, other_epoch);
    if (result == WaitResult::kStopped) return failed_elsewhere(first_missing());
    return true;
  }

  // dst = contribution(0) (op) contribution(1) (op) ... in rank order, over `elems` elements (bf16 and f16 in
  // f32, rounded once: fold_sources).
  template <class Contribution>
  void reduce_ranks(void* dst, size_t elems, Contribution contribution) {
    fold_sources(call_.dtype, call_.op, dst, elems, world_, contribution);
  }

  const HostFailure& failure() const { return failure_; }

 private:
  // The first peer, in rank order, whose published call shows it in another call than this one at this call's
  // first epoch (its signature and epoch in `other`, `other_epoch`), or -1. A peer whose signal of this exchange
  // arrived is checked at the first exchange only (its signal ordered its signature before this read); one still
  // missing, only if it published another call for this epoch.
  int peer_in_another_call(bool first, CallSignature* other, uint64_t* other_epoch) const {
    for (int p = 0; p < world_; ++p) {
      if (p == me_.rank) continue;
      const bool arrived = me_.channels[p].arrived();
      if (arrived && !first) continue;
      CallSignature s;
      const uint64_t e = group_.ranks[p].published->read(first_epoch_, &s);
      const bool same = s == signature_;
      if (arrived ? e != first_epoch_ || !same : e == first_epoch_ && !same) {
        if (other) *other = s, *other_epoch = e;
        return p;
      }
    }
    return -1;
  }

  // The first peer, in rank order, whose signal of this exchange has not arrived.
  int first_missing() const {
    for (int p = 0; p < world_; ++p)
      if (p != me_.rank && !me_.channels[p].arrived()) return p;
    return -1;
  }

  std::string where() const {
    return std::string(collective_name(call_.collective)) + " (" + algorithm_name(call_.algorithm) +
           ", communicator " + std::to_string(comm_.id()) + "): rank " + std::to_string(me_.rank) + " of " +
           std::to_string(world_);
  }

  // The wait for `peer` outlived the time limit: this rank names the peer and fails the group.
  bool timed_out(int peer) {
    failure_.kind = FailureKind::kTimedOut;
    failure_.message = "jax_mscclpp: timeout after " + seconds_text(timeout_s_) + " s in " + where() +
                       " waited for peer " + std::to_string(peer) + " at epoch " + std::to_string(me_.epoch) +
                       peer_state(peer, *group_.ranks[peer].published,
                                  [&](const CallSignature& c) { return comm_.describe(c); }) +
                       " (set JAX_MSCCLPP_TIMEOUT_S to change the limit)";
    group_.mark_broken(failure_);
    return false;
  }

  // The group failed on another rank while this one waited for `peer`: stop with that rank's reason.
  bool failed_elsewhere(int peer) {
    failure_ = group_.caused_by_root("jax_mscclpp: " + where() + " stopped waiting for peer " + std::to_string(peer) +
                                     " at epoch " + std::to_string(me_.epoch) +
                                     " because the call failed on another rank: ");
    return false;
  }

  bool mismatch(int peer, const CallSignature& theirs, uint64_t their_epoch) {
    failure_.kind = FailureKind::kOutOfStep;
    failure_.message = mismatch_message(comm_.id(), me_.rank, world_, first_epoch_, comm_.describe(signature_), peer,
                                        their_epoch, comm_.describe(theirs));
    group_.mark_broken(failure_);
    return false;
  }

#if JAX_MSCCLPP_TESTING
  // The injected fault of a rank lost in the middle of a call: it stops without telling anyone.
  bool injected_stop() {
    failure_.kind = FailureKind::kInjected;
    failure_.message = "jax_mscclpp: " + where() + " stopped after " + std::to_string(exchanges_) +
                       " exchange(s) of the call at epoch " + std::to_string(me_.epoch) +
                       " (a fault injected by jax_mscclpp.testing.faults.stop_mid_call)";
    return false;
  }
#endif

  HostCommunicator& comm_;
  HostGroup& group_;
  HostRankState& me_;
  const CollectiveCall& call_;
  double timeout_s_;
  Clock::time_point deadline_;
  int world_;
  size_t elem_;
  CallSignature signature_;
  uint64_t first_epoch_;
#if JAX_MSCCLPP_TESTING
  int stop_after_exchanges_ = -1;  // the injected stop (InjectedFaults::stop_exchanges); -1: none
#endif
  int exchanges_ = 0;
  HostFailure failure_;
};

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

// 1PA: every rank puts its whole (round of the) input into every peer's scratch, then reduces what it received.
bool all_reduce_one_phase(RankCall& rc, const CollectiveCall& call) {
  const size_t es = rc.elem(), slot_bytes = rc.half_bytes() / rc.world() / es * es, per_round = slot_bytes / es;
  const size_t n = call.block_count;
  for (size_t off = 0; off == 0 || off < n; off += per_round) {  // one round at least: every call is checked
    const size_t len = std::min(per_round, n - off);
    const size_t half = rc.begin_round();
    const std::byte* in = bytes(call.in) + off * es;
    for (int p = 0; p < rc.world(); ++p)
      if (p != rc.rank()) rc.put(p, half + rc.rank() * slot_bytes, in, len);
    if (!rc.exchange()) return false;
    rc.reduce_ranks(bytes(call.out) + off * es, len, [&](int r) {
      return r == rc.rank() ? in : rc.my_scratch(half + r * slot_bytes);
    });
  }
  return true;
}

// 2PA: reduce-scatter (piece p of every rank's input meets at rank p), then all-gather of the reduced pieces.
// The scratch half holds a reduce-scatter region and an all-gather region of `world` slots each.
bool all_reduce_two_phase(RankCall& rc, const CollectiveCall& call) {
  const int W = rc.world(), me = rc.rank();
  const size_t es = rc.elem(), slot_bytes = rc.half_bytes() / (2 * W) / es * es, slot_elems = slot_bytes / es;
  const size_t n = call.block_count, per_round = slot_elems * W, gather_region = W * slot_bytes;
  for (size_t off = 0; off == 0 || off < n; off += per_round) {  // one round at least: every call is checked
    const size_t len = std::min(per_round, n - off), piece = (len + W - 1) / W;
    auto piece_begin = [&](int p) { return std::min(len, p * piece); };
    auto piece_len = [&](int p) { return std::min(len, (p + 1) * piece) - piece_begin(p); };
    const size_t half = rc.begin_round();
    const std::byte* in = bytes(call.in) + off * es;
    std::byte* out = bytes(call.out) + off * es;
    for (int p = 0; p < W; ++p)
      if (p != me) rc.put(p, half + me * slot_bytes, in + piece_begin(p) * es, piece_len(p));
    if (!rc.exchange()) return false;
    std::byte* mine = out + piece_begin(me) * es;
    rc.reduce_ranks(mine, piece_len(me), [&](int r) {
      return r == me ? in + piece_begin(me) * es : rc.my_scratch(half + r * slot_bytes);
    });
    for (int p = 0; p < W; ++p)
      if (p != me) rc.put(p, half + gather_region + me * slot_bytes, mine, piece_len(me));
    if (!rc.exchange()) return false;
    for (int r = 0; r < W; ++r)
      if (r != me && piece_len(r))
        std::memcpy(out + piece_begin(r) * es, rc.my_scratch(half + gather_region + r * slot_bytes),
                    piece_len(r) * es);
  }
  return true;
}

// All-pairs exchange shared by all_gather, reduce_scatter and all_to_all: in each round every rank puts
// `source(peer)` (a run of elements of its input) into slot `rank` of each peer's scratch, then `consume`
// reads the slots it received.
template <class Source, class Consume>
bool all_pairs_rounds(RankCall& rc, size_t n, Source source, Consume consume) {
  const size_t es = rc.elem(), slot_bytes = rc.half_bytes() / rc.world() / es * es, per_round = slot_bytes / es;
  for (size_t off = 0; off == 0 || off < n; off += per_round) {  // one round at least: every call is checked
    const size_t len = std::min(per_round, n - off);
    const size_t half = rc.begin_round();
    for (int p = 0; p < rc.world(); ++p)
      if (p != rc.rank()) rc.put(p, half + rc.rank() * slot_bytes, source(p, off), len);
    if (!rc.exchange()) return false;
    consume(off, len, [&](int r) { return r == rc.rank() ? source(r, off) : rc.my_scratch(half + r * slot_bytes); });
  }
  return true;
}

// The permutation: each round, a rank puts its part of the block into slot 0 of its destination's scratch half
// (a rank has at most one source, so the slot is the whole half), exchanges with every peer (the end of a round
// for every collective, which orders the reuse of the half two rounds later), then copies what its source sent,
// or zeros when it has none.
bool permute_rounds(RankCall& rc, const CollectiveCall& call) {
  const size_t es = rc.elem(), per_round = rc.half_bytes() / es, n = call.block_count;
  for (size_t off = 0; off == 0 || off < n; off += per_round) {  // one round at least: every call is checked
    const size_t len = std::min(per_round, n - off);
    const size_t half = rc.begin_round();
    const std::byte* in = bytes(call.in) + off * es;
    std::byte* out = bytes(call.out) + off * es;
    if (call.send_to >= 0 && call.send_to != rc.rank()) rc.put(call.send_to, half, in, len);
    if (!rc.exchange()) return false;
    if (!len) continue;
    if (call.recv_from < 0)
      std::memset(out, 0, len * es);
    else if (call.recv_from == rc.rank())
      std::memmove(out, in, len * es);
    else
      std::memcpy(out, rc.my_scratch(half), len * es);
  }
  return true;
}

bool run_on_rank(RankCall& rc, const CollectiveCall& call) {
  const size_t es = rc.elem(), n = call.block_count;
  const std::byte* in = bytes(call.in);
  std::byte* out = bytes(call.out);
  // Received slot r lands in output block r (all_gather, all_to_all).
  auto copy_to_blocks = [&](size_t off, size_t len, auto received) {
    if (!len) return;
    for (int r = 0; r < rc.world(); ++r) std::memcpy(out + (r * n + off) * es, received(r), len * es);
  };
  switch (call.collective) {
    case Collective::kAllReduce:
      if (host_run(call.algorithm) == kHostOnePhase) return all_reduce_one_phase(rc, call);
      return all_reduce_two_phase(rc, call);
    case Collective::kAllGather:
      return all_pairs_rounds(rc, n, [&](int, size_t off) { return in + off * es; }, copy_to_blocks);
    case Collective::kReduceScatter:
      return all_pairs_rounds(
          rc, n, [&](int p, size_t off) { return in + (p * n + off) * es; },
          [&](size_t off, size_t len, auto received) { rc.reduce_ranks(out + off * es, len, received); });
    case Collective::kAllToAll:
      return all_pairs_rounds(rc, n, [&](int p, size_t off) { return in + (p * n + off) * es; }, copy_to_blocks);
    case Collective::kPermute:
      return permute_rounds(rc, call);
  }
  return true;
}

// codes.def's `host` column: all_reduce in one or two phases, the permutation point-to-point, the other
// collectives all-pairs.
bool supported_on_host(const CollectiveCall& call) {
  const HostRun run = host_run(call.algorithm);
  if (!algorithm_serves(call.algorithm, call.collective)) return false;
  if (call.collective == Collective::kAllReduce) return run == kHostOnePhase || run == kHostTwoPhase;
  if (call.collective == Collective::kPermute) return run == kHostPointToPoint;
  return run == kHostAllPairs;
}

}  // namespace

HostFailure run_collective(HostCommunicator& comm, int partition, const CollectiveCall& call, double timeout_s) {
  HostGroup* group = comm.group_of(partition);
  HostRankState* me = comm.rank_state(partition);
  auto refused = [](std::string message) { return HostFailure{FailureKind::kRefused, std::move(message)}; };
  if (!group || !me) {
    return refused("jax_mscclpp: partition " + std::to_string(partition) + " is not part of communicator " +
                   std::to_string(comm.id()) + " (" + std::to_string(comm.num_partitions()) + " partitions)");
  }
  if (dtype_size(call.dtype) == 0) return refused("jax_mscclpp: unsupported element type");
  if (call.send_to >= comm.world_size() || call.recv_from >= comm.world_size())
    return refused("jax_mscclpp: permute names a rank outside the communicator's " + std::to_string(comm.world_size()));
  if (!supported_on_host(call)) {
    return refused(std::string("jax_mscclpp: the host backend does not run ") + collective_name(call.collective) +
                   " with algorithm " + algorithm_name(call.algorithm));
  }
  if (group->broken.load(std::memory_order_acquire))
    return group->caused_by_root("jax_mscclpp: communicator " + std::to_string(comm.id()) +
                                 " is unusable after an earlier failure: ");
#if JAX_MSCCLPP_TESTING
  if (me->faults->skip_calls.load(std::memory_order_relaxed) > 0) {  // injected: this rank does not show up
    me->faults->skip_calls.fetch_sub(1, std::memory_order_relaxed);
    return {};
  }
#endif
  RankCallGuard guard(comm.id(), *group, *me, CallSignature::of(call, -1));
  if (!guard.admitted()) return guard.failure();
  RankCall rc(comm, *group, *me, call, timeout_s);
  return run_on_rank(rc, call) ? HostFailure{} : rc.failure();
}

}  // namespace jax_mscclpp::host
