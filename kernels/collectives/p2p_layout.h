// The point-to-point engine's layout (launch_p2p_group, collectives/p2p_group.cu), the one place host and device
// compute it from: where the slot rings lie, which counter words exist, how a message is cut into lanes and
// chunks, and what a rank holds of each peer (P2PPeerHandle, the device table CollectiveContext::p2p). Every
// quantity is a function of (nranks, the p2p byte budget) and of a message's byte count alone, so every rank
// computes the same numbers without exchanging any.
//
// Region. Each rank's registered scratch allocation is [scratch | call inbox | p2p region]: the region starts at
// p2p_region_offset(scratch_bytes, nranks) (after the call inbox, 256-byte aligned), so the peers' mappings of the
// allocation cover it and no buffer is registered for it. The collectives' scratch and the call inbox are
// unchanged. Receiver r holds one ring of S slots of C bytes per (sender s != r, lane l):
//
//   ring (s, l) of receiver r at  region + ((j * kP2PLanes + l) * S) * C,  j = (s - r - 1) mod n;  slot i at + i * C
//
//   C = min(kP2PMaxChunk, round_down(budget / ((n - 1) * kP2PLanes * S), 16)),  S = kP2PSlots
//
// (C = 0: the budget cannot hold a 16-byte slot per ring, and the context has no p2p resources). The budget is
// RankOptions::p2p_bytes (runtime/gpu/rank_context.h), by default p2p_default_bytes(scratch_bytes).
//
// Words. kP2PWords 64-bit words per (peer, lane) in each rank's semaphore pool, zero at creation, never reset (they
// persist across launches like the semaphores). The engine's four counters, monotonic: data_in (the peer adds 1
// after putting a chunk into my slots), credit_in (the peer adds 1 after consuming a chunk I put into its slots),
// sent (chunks I ever put to the peer on this lane) and received (chunks I ever consumed from the peer on this
// lane). Then the words of the ragged all-to-all's direct exchange between ranks of one process
// (ragged_all_to_all.cu states that protocol). Peers write only the words named "_in"; the others are read at a
// launch's start and stored at its end by the one block that owns the lane's stream in that launch.
//
// Lanes. A message of B bytes is cut into lanes = min(kP2PLanes, ceil(B / kP2PMinLaneBytes)) parts, part l =
// [l * step, (l + 1) * step) clipped to B, step = round_up(ceil(B / lanes), 16) (B = 0: no lane), and each part
// into chunks of C bytes (the last shorter). Both ends of a message compute this from the byte count they share.
#pragma once

#include <cstdint>

#include "jax_mscclpp/call_inbox.cuh"
#include "jax_mscclpp/error_record.cuh"

namespace jax_mscclpp {

constexpr int kP2PLanes = 8;                       // streams per (peer, direction): thread blocks in parallel
constexpr int kP2PSlots = 4;                       // S: chunks in flight per (sender, receiver, lane)
constexpr uint64_t kP2PMaxChunk = 128ull << 10;    // largest C: a 512-thread block's copy, 16 vectors a thread
constexpr uint64_t kP2PMinLaneBytes = 64ull << 10; // a message gets a lane per this many bytes, up to kP2PLanes
constexpr uint64_t kP2PDefaultMaxBytes = 16ull << 20;
constexpr int kP2PMaxBlocks = 64;                  // grid cap of a launch (with the context's stream_blocks)

// The words of one (peer, lane), in this order, kP2PWords apart per lane (P2PPeerHandle::words). The direct
// exchange's words are lane 0's but for kP2PDirectSent; "sender" and "receiver" are the two ends of one direction.
enum P2PWord : int {
  kP2PDataIn = 0,
  kP2PCreditIn = 1,
  kP2PSent = 2,
  kP2PReceived = 3,
  kP2PPostedIn = 4,         // sender's: the receiver adds 1 a launch, after writing the next two
  kP2POutputIn = 5,         // sender's: the receiver's output address in that launch
  kP2POutputBytesIn = 6,    // sender's: its bytes
  kP2PClosedIn = 7,         // sender's: the last launch whose output the receiver gave up on (no more writes there)
  kP2PWrittenIn = 8,        // receiver's: each sender lane adds 1 a launch, its rows written (or none to write)
  kP2PFirstRowIn = 9,       // receiver's: the sender's output_offsets[receiver], or kNoRows (rows it cannot read)
  kP2PRowsIn = 10,          // receiver's: the sender's send_sizes[receiver]
  kP2PWritersIn = 11,       // receiver's: the sender's blocks writing into the receiver's output right now
  kP2PDirectSent = 12,      // sender's own, every lane: launches the lane ever sent to the peer directly
  kP2PDirectReceived = 13,  // receiver's own: launches it ever received from the peer directly
};
constexpr int kP2PWords = 16;

JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t p2p_ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t p2p_round_up(uint64_t a, uint64_t b) { return p2p_ceil_div(a, b) * b; }

// The default budget for a rank with `scratch_bytes` of collective scratch: a quarter of it, at most 16 MiB.
inline uint64_t p2p_default_bytes(uint64_t scratch_bytes) {
  const uint64_t quarter = scratch_bytes / 4 / 256 * 256;
  return quarter < kP2PDefaultMaxBytes ? quarter : kP2PDefaultMaxBytes;
}

// Where the p2p region starts in a rank's scratch allocation (after its call inbox).
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t p2p_region_offset(uint64_t scratch_bytes, int nranks) {
  return p2p_round_up(call_inbox_offset(scratch_bytes) + call_inbox_bytes(nranks), 256);
}

struct P2PLayout {
  int32_t nranks;
  int32_t slots;          // S
  uint64_t chunk;         // C, a multiple of 16; 0: no p2p resources
  uint64_t region_bytes;  // the whole region of one rank

  // The layout for `nranks` ranks and a budget of `budget` bytes of slots per rank.
  static P2PLayout of(int nranks, uint64_t budget) {
    P2PLayout l{nranks, kP2PSlots, 0, 0};
    if (nranks < 2) return l;
    const uint64_t rings = static_cast<uint64_t>(nranks - 1) * kP2PLanes * kP2PSlots;
    uint64_t chunk = budget / rings / 16 * 16;
    if (chunk > kP2PMaxChunk) chunk = kP2PMaxChunk;
    if (chunk < 16) return l;
    l.chunk = chunk;
    l.region_bytes = rings * chunk;
    return l;
  }
  JAX_MSCCLPP_HOST_DEVICE_INLINE bool usable() const { return chunk != 0; }
  // Offset in receiver's region of the ring (sender, lane 0); lane l's ring follows at + l * ring_bytes().
  JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t rings_offset(int sender, int receiver) const {
    const uint64_t j = static_cast<uint64_t>((sender - receiver - 1 + 2 * nranks) % nranks);
    return j * kP2PLanes * ring_bytes();
  }
  JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t ring_bytes() const { return static_cast<uint64_t>(slots) * chunk; }
  // Chunk k (the lane's count over every launch) of lane `lane` lies in slot k mod S.
  JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t slot_offset(int lane, uint64_t k) const {
    return static_cast<uint64_t>(lane) * ring_bytes() + (k % static_cast<uint64_t>(slots)) * chunk;
  }
};

// Lanes of a message of `bytes` bytes, and bytes [lo, hi) of its lane `lane` (empty past its lanes).
JAX_MSCCLPP_HOST_DEVICE_INLINE uint32_t p2p_lanes(uint64_t bytes) {
  const uint64_t lanes = p2p_ceil_div(bytes, kP2PMinLaneBytes);
  return static_cast<uint32_t>(lanes < kP2PLanes ? lanes : kP2PLanes);
}
struct P2PLanePart {
  uint64_t lo;
  uint64_t hi;
  JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t size() const { return hi - lo; }
};
JAX_MSCCLPP_HOST_DEVICE_INLINE P2PLanePart p2p_lane_part(uint64_t bytes, uint32_t lane) {
  const uint32_t lanes = p2p_lanes(bytes);
  if (lane >= lanes) return {bytes, bytes};
  const uint64_t step = p2p_round_up(p2p_ceil_div(bytes, lanes), 16);
  const uint64_t lo = static_cast<uint64_t>(lane) * step < bytes ? static_cast<uint64_t>(lane) * step : bytes;
  return {lo, lo + step < bytes ? lo + step : bytes};
}

// What a rank holds of peer p (entry p of CollectiveContext::p2p; the rank's own entry is zero). Built by the
// host runtime (runtime/gpu/rank_context.h, RankContext::p2p_peer).
struct P2PPeerHandle {
  uint64_t* words;         // this rank's pool: lane l's counters about p at words + l * kP2PWords (P2PWord)
  uint64_t* remote_words;  // p's pool, mapped here: p's counters about this rank (this rank adds to their
                           // data_in and credit_in)
  char* local_rings;       // this rank's region: the rings p writes into (ring (p, lane 0))
  char* remote_rings;      // p's region, mapped here: the rings this rank writes into (ring (rank, lane 0))
  WaitSite site;           // waits for p
  // 1: p is a rank of this process (RankOptions::direct_exchange on): its device addresses are valid here, so the
  // ragged all-to-all writes this rank's rows straight into p's output (the direct exchange) instead of its rings.
  int32_t direct;
};

}  // namespace jax_mscclpp
