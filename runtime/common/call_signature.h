// CallSignature: what one rank's call is (collective, op, dtype, elements per block, algorithm, plan), published
// to its peers so that ranks that entered different calls fail at once with an error naming both calls, instead
// of exchanging mismatched data (a wrong answer) or waiting for signals that never come (a timeout).
//
// Protocol (docs/reliability.md, "Call signatures"): a rank publishes its signature, tagged with the epoch of
// the call's first round, before its first signal (or first packet) of the call; a peer reads it after the wait
// that consumed that signal (acquire), so the read is ordered after the write. Slots alternate by the epoch's
// parity, as the scratch halves do: a rank rewrites slot e & 1 only in round e + 2, which starts after every
// peer sent its round e + 1 signal, which each peer does after it finished reading round e. A read outside that
// protocol (what a peer is doing when a wait times out) may see a stale slot: it only words an error message.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "collective_types.h"
#include "jax_mscclpp/call_inbox.cuh"

namespace jax_mscclpp::host {

struct CallSignature {
  Collective collective = Collective::kAllReduce;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAllPairs;
  DType dtype = DType::kInvalid;
  uint64_t block_count = 0;
  int64_t plan_id = -1;

  static CallSignature of(const CollectiveCall& call, int64_t plan_id) {
    return {call.collective, call.op, call.algorithm, call.dtype, call.block_count, plan_id};
  }
  // Two words, so that a slot holds plain atomics: [collective | op | algorithm | dtype | plan id], elements.
  // The low half packs the codes as the GPU call words do (jax_mscclpp/call_inbox.cuh).
  uint64_t word0() const {
    return uint64_t(pack_call(int32_t(collective), int32_t(op), int32_t(algorithm), int32_t(dtype))) |
           uint64_t(uint32_t(plan_id)) << 32;
  }
  static CallSignature from_words(uint64_t w0, uint64_t w1) {
    CallSignature s;
    s.collective = Collective(int32_t(w0 & 0xff));
    s.op = ReduceOp(int32_t(w0 >> 8 & 0xff));
    s.algorithm = Algorithm(int32_t(w0 >> 16 & 0xff));
    s.dtype = DType(int32_t(w0 >> 24 & 0xff));
    s.plan_id = int64_t(int32_t(uint32_t(w0 >> 32)));
    s.block_count = w1;
    return s;
  }
  bool operator==(const CallSignature& o) const { return word0() == o.word0() && block_count == o.block_count; }
};

// "all_reduce(sum) of 1024 float32 per block, algorithm 1pa_ll" (or "..., plan 'name'" given the plan's name).
inline std::string describe(const CallSignature& s, const std::string& plan_name = "") {
  std::string out = collective_name(s.collective);
  if (collective_reduces(static_cast<int32_t>(s.collective)))
    out += std::string("(") + op_name(s.op) + ")";
  out += " of " + std::to_string(s.block_count) + " " + dtype_name(s.dtype) + " per block, ";
  if (s.algorithm != Algorithm::kPlan)
    out += std::string("algorithm ") + algorithm_name(s.algorithm);
  else if (!plan_name.empty())
    out += "plan '" + plan_name + "'";
  else
    out += "plan " + std::to_string(s.plan_id);
  return out;
}

// One rank's published signatures, by the parity of the epoch of each call's first round. Epoch 0 is never a
// call's (rounds start at 1), so it marks an empty slot.
struct PublishedCalls {
  struct Slot {
    std::atomic<uint64_t> epoch{0}, word0{0}, word1{0};
  };
  Slot slots[2];

  // Ordered before the peers' reads by the release of the rank's next signal or packet.
  void publish(uint64_t epoch, const CallSignature& s) {
    Slot& slot = slots[epoch & 1];
    slot.word0.store(s.word0(), std::memory_order_relaxed);
    slot.word1.store(s.block_count, std::memory_order_relaxed);
    slot.epoch.store(epoch, std::memory_order_relaxed);
  }
  // The signature published for `epoch`'s slot and the epoch it was published for (0: nothing yet).
  uint64_t read(uint64_t epoch, CallSignature* s) const {
    const Slot& slot = slots[epoch & 1];
    const uint64_t e = slot.epoch.load(std::memory_order_relaxed);
    *s = CallSignature::from_words(slot.word0.load(std::memory_order_relaxed),
                                   slot.word1.load(std::memory_order_relaxed));
    return e;
  }
  // The latest call published (for error messages): its first epoch, 0 when none.
  uint64_t latest(CallSignature* s) const {
    const uint64_t e0 = slots[0].epoch.load(std::memory_order_relaxed);
    const uint64_t e1 = slots[1].epoch.load(std::memory_order_relaxed);
    return read(e0 > e1 ? 0 : 1, s);
  }
};

// What every mismatch message starts with, on CPU devices and GPUs alike.
inline constexpr const char* kMismatchPrefix = "jax_mscclpp: mismatched collective calls";

// What every mismatch message ends with, on CPU devices and GPUs alike.
inline constexpr const char* kSameCallsAdvice =
    "every rank of a group must make the same collective calls in the same order";

// The error of a rank whose peer entered another call (a mismatch) or is out of step (another epoch); the calls
// as describe() words them.
inline std::string mismatch_message(int64_t comm_id, int rank, int world, uint64_t epoch, const std::string& mine,
                                    int peer, uint64_t peer_epoch, const std::string& theirs) {
  return std::string(kMismatchPrefix) + " on communicator " + std::to_string(comm_id) + ": rank " +
         std::to_string(rank) + " of " + std::to_string(world) + " called " + mine + " (epoch " +
         std::to_string(epoch) + ") but peer " + std::to_string(peer) + " called " + theirs + " (epoch " +
         std::to_string(peer_epoch) + "); " + kSameCallsAdvice;
}

// What a peer is doing, for a timeout message: "; peer 3's latest call: ..., from epoch 7". `describe_call` words
// a signature.
template <class Describe>
std::string peer_state(int peer, const PublishedCalls& published, Describe&& describe_call) {
  CallSignature s;
  const uint64_t e = published.latest(&s);
  if (e == 0) return "; peer " + std::to_string(peer) + " has made no call on this communicator";
  return "; peer " + std::to_string(peer) + "'s latest call: " + describe_call(s) + ", from epoch " + std::to_string(e);
}

}  // namespace jax_mscclpp::host
