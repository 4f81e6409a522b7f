// What a launch tells its peers about its call, and where it tells them: the call words and every rank's call
// inbox (docs/architecture.md, "Call checks"). The protocol that uses them is call_check.cuh; error records
// (error_record.cuh) carry the words too, so that a timeout can say which calls the ranks were in.
//
// Each rank's registered scratch is followed by its call inbox (at call_inbox_offset): first the "failed" word and
// the "recorded" word (kFailedWordBytes), then one slot per (sender, epoch parity), kCallSlotWords words each: [call | count] then
// [variant | unused], every word tagged with uint32(epoch) in its upper half. A rank posts into its own row too,
// so its latest call can be read beside its peers' when a wait times out.
//
// The failed word is 0 while the communicator is sound. A rank whose call check finds a peer in another call
// stores 1 + its rank into every peer's failed word before it traps (call_check.cuh); a rank's bounded waits read
// their own failed word on their slow path (error_record.cuh, SpinBound) and stop with a record naming that
// rank, so a peer stuck waiting for data the mismatched call never sends fails at once, not at its time limit.
// The word is never cleared: the communicator stays failed (the host makes a new one).
//
// The recorded word is written by its own rank only, where kernels stop instead of trapping: nonzero once the rank
// has claimed its error record (error_record.cuh, record_failure). Every thread of every kernel still queued gives
// up its waits one by one; with the word set each gives up at once, without another record or a host access.
#pragma once

#include <cstdint>

#include "atomics.cuh"
#include "codes.h"

namespace jax_mscclpp {

// `call` packs the codes (codes.def) as CallSignature does on the host (runtime/common/call_signature.h): collective | op << 8
// | algorithm << 16 | dtype << 24, op 0 where the collective has none. `count` is the low half of the elements per
// block. `variant` tells apart calls of one algorithm that exchange alike but compute differently: a plan's
// fingerprint (plan_fingerprint) or a fused epilogue (epilogue_variant); 0 for a plain collective.
struct CallWords {
  uint32_t call;
  uint32_t count;
  uint32_t variant;
};

constexpr uint32_t kCallPlan = 0x80000000u;
constexpr uint32_t kCallEpilogue = 0x40000000u;

JAX_MSCCLPP_HOST_DEVICE_INLINE uint32_t pack_call(int32_t collective, int32_t op, int32_t algorithm, int32_t dtype) {
  return uint32_t(uint8_t(collective)) | uint32_t(uint8_t(op)) << 8 | uint32_t(uint8_t(algorithm)) << 16 |
         uint32_t(uint8_t(dtype)) << 24;
}

// The words of a call; the op counts only for the collectives that reduce.
JAX_MSCCLPP_HOST_DEVICE_INLINE CallWords call_words(int32_t collective, int32_t op, int32_t algorithm, int32_t dtype,
                                                    uint64_t block_count, uint32_t variant = 0) {
  return {pack_call(collective, collective_reduces(collective) ? op : 0, algorithm, dtype),
          static_cast<uint32_t>(block_count), variant};
}

// A plan's variant: kCallPlan | a 30-bit FNV-1a hash of its name, the same in every process.
inline uint32_t plan_fingerprint(const char* name) {
  uint32_t h = 2166136261u;
  for (const char* p = name; *p != '\0'; ++p) h = (h ^ uint8_t(*p)) * 16777619u;
  return kCallPlan | (h & ~kCallPlan & ~kCallEpilogue);
}

// A fused epilogue's variant: kCallEpilogue | epilogue code << 24 | the low 24 bits of its row length.
JAX_MSCCLPP_HOST_DEVICE_INLINE uint32_t epilogue_variant(int32_t epilogue, uint64_t row) {
  return kCallEpilogue | uint32_t(epilogue & 0x3f) << 24 | uint32_t(row & 0xffffff);
}

constexpr int kCallSlotWords = 4;  // 32 bytes: two 16-byte halves, each moved by one vector access
constexpr uint64_t kFailedWordBytes = 16;  // the failed and recorded words; the slots stay 16-byte aligned

// Where the call inbox starts after a registered scratch of `scratch_bytes`, and its size for `nranks` senders.
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t call_inbox_offset(uint64_t scratch_bytes) {
  return (scratch_bytes + 255) / 256 * 256;
}
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t call_inbox_bytes(int nranks) {
  return kFailedWordBytes + uint64_t(nranks) * 2 * kCallSlotWords * sizeof(uint64_t);
}

#if defined(__CUDACC__)

JAX_MSCCLPP_DEVICE_INLINE uint64_t* call_slot(const char* inbox, int sender, uint64_t epoch) {
  return const_cast<uint64_t*>(reinterpret_cast<const uint64_t*>(inbox + kFailedWordBytes)) +
         (uint64_t(sender) * 2 + (epoch & 1)) * kCallSlotWords;
}

JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t* failed_word(const char* inbox) {
  return const_cast<uint64_t*>(reinterpret_cast<const uint64_t*>(inbox));
}

JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t* recorded_word(const char* inbox) { return failed_word(inbox) + 1; }

// Tells the rank whose call inbox is `inbox` that rank `rank` failed the communicator (its failed word). The caller
// fences (system scope) after the last one.
JAX_MSCCLPP_DEVICE_INLINE void mark_failed(char* inbox, int rank) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(failed_word(inbox)), "l"(uint64_t(rank) + 1) : "memory");
}

// One slot as read: the words and the epoch tag of each.
struct PostedCall {
  CallWords words;
  uint32_t tag[3];
};

// A slot's three words, loaded together (relaxed, system scope; each word is atomic, its tag says whose it is).
JAX_MSCCLPP_DEVICE_INLINE PostedCall read_slot(const uint64_t* slot) {
  uint64_t w0, w1;
  asm volatile("ld.relaxed.sys.v2.u64 {%0, %1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(slot) : "memory");
  const uint64_t w2 = load_relaxed_sys(slot + 2);
  return {{uint32_t(w0), uint32_t(w1), uint32_t(w2)}, {uint32_t(w0 >> 32), uint32_t(w1 >> 32), uint32_t(w2 >> 32)}};
}

// The latest call `sender` posted into `inbox` (the newer of its two slots) and its epoch tag; 0: none yet.
// For error messages only: a slot being rewritten may read torn.
JAX_MSCCLPP_DEVICE_INLINE uint32_t latest_call(const char* inbox, int sender, CallWords* words) {
  const PostedCall a = read_slot(call_slot(inbox, sender, 0)), b = read_slot(call_slot(inbox, sender, 1));
  const bool b_newer = static_cast<int32_t>(b.tag[0] - a.tag[0]) > 0;
  *words = b_newer ? b.words : a.words;
  return b_newer ? b.tag[0] : a.tag[0];
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
