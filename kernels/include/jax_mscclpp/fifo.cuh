// The proxy FIFO: GPU threads push 16-byte triggers, one host proxy thread per process pops them.
//
// Memory: the ring of `size` slots and the tail live in pinned, mapped host memory (cudaHostAlloc), so the
// host polls its own memory; the head (next position to claim) and a cached lower bound of the tail live in
// device memory, so an uncontended push never reads across PCIe.
//
// Protocol (positions are 64-bit and never wrap; slot = pos % size):
//   device push: claim pos = atomicAdd(head, 1); if pos >= tail + size (FIFO full), spin (bounded) re-reading
//                the host tail; write fst, system fence, write snd. snd is never 0 for a valid trigger, so a
//                nonzero snd marks the slot full.
//   host pop   : wait for slots[tail % size].snd != 0, read fst, handle the trigger, clear the slot (snd = 0),
//                then publish tail + 1 (release). A flush is handled (its copies completed) before its tail
//                advance, so `tail > pos` means "trigger pos and everything before it are done".
// A push starts with a system fence: data this thread wrote or observed before the push is visible to the
// copy the trigger asks for.
#pragma once

#include <cstdint>

#include "atomics.cuh"
#include "error_record.cuh"

namespace jax_mscclpp {

struct alignas(16) ProxyTrigger {
  uint64_t fst;  // bits 0-31: size in bytes; bits 32-63: source offset
  uint64_t snd;  // bits 0-31: destination offset; bits 32-35: type mask (nonzero); bits 36-63: channel id
};

enum TriggerType : uint32_t {
  kTriggerPut = 1,     // copy `size` bytes: channel's src + src_off -> channel's dst + dst_off
  kTriggerSignal = 2,  // after the copies before it on this channel, bump the peer's semaphore
  kTriggerFlush = 4,   // complete every earlier copy of this channel before the tail advances
  kTriggerCustom = 8,  // handed to the custom handler registered under `channel id`; the other 96 bits are free
};

constexpr uint32_t kTriggerChannelBits = 28;
constexpr uint32_t kMaxTriggerChannels = 1u << kTriggerChannelBits;

JAX_MSCCLPP_HOST_DEVICE_INLINE ProxyTrigger make_trigger(uint32_t type, uint32_t channel, uint32_t dst_off,
                                                         uint32_t src_off, uint32_t size) {
  ProxyTrigger t;
  t.fst = static_cast<uint64_t>(size) | (static_cast<uint64_t>(src_off) << 32);
  t.snd = static_cast<uint64_t>(dst_off) | (static_cast<uint64_t>(type & 0xFu) << 32) |
          (static_cast<uint64_t>(channel & (kMaxTriggerChannels - 1)) << 36);
  return t;
}
JAX_MSCCLPP_HOST_DEVICE_INLINE uint32_t trigger_size(const ProxyTrigger& t) { return static_cast<uint32_t>(t.fst); }
JAX_MSCCLPP_HOST_DEVICE_INLINE uint32_t trigger_src_offset(const ProxyTrigger& t) {
  return static_cast<uint32_t>(t.fst >> 32);
}
JAX_MSCCLPP_HOST_DEVICE_INLINE uint32_t trigger_dst_offset(const ProxyTrigger& t) {
  return static_cast<uint32_t>(t.snd);
}
JAX_MSCCLPP_HOST_DEVICE_INLINE uint32_t trigger_type(const ProxyTrigger& t) {
  return static_cast<uint32_t>(t.snd >> 32) & 0xFu;
}
JAX_MSCCLPP_HOST_DEVICE_INLINE uint32_t trigger_channel(const ProxyTrigger& t) {
  return static_cast<uint32_t>(t.snd >> 36);
}

// Custom trigger for handler `handler_id`: 32 bits in the low word of snd and 64 in fst are free.
JAX_MSCCLPP_HOST_DEVICE_INLINE ProxyTrigger make_custom_trigger(uint32_t handler_id, uint64_t payload_hi,
                                                                uint32_t payload_lo) {
  ProxyTrigger t;
  t.fst = payload_hi;
  t.snd = static_cast<uint64_t>(payload_lo) | (static_cast<uint64_t>(kTriggerCustom) << 32) |
          (static_cast<uint64_t>(handler_id & (kMaxTriggerChannels - 1)) << 36);
  return t;
}

struct FifoDeviceHandle {
  ProxyTrigger* slots;   // host memory (mapped), `size` entries
  uint64_t* tail;        // host memory (mapped): positions below it are consumed; written by the proxy only
  uint64_t* head;        // device memory: next position to claim
  uint64_t* tail_cache;  // device memory: a tail value some thread has seen (lower bound of tail)
  uint32_t size;
  WaitSite site;

#if defined(__CUDACC__)
  // Pushes one trigger; returns its position (for sync). Any number of threads may push concurrently.
  JAX_MSCCLPP_DEVICE_INLINE uint64_t push(const ProxyTrigger& trigger) const {
    __threadfence_system();
    const uint64_t pos = atomicAdd(reinterpret_cast<unsigned long long*>(head), 1ull);
    if (pos >= load_acquire_sys(tail_cache) + size) {
      SpinBound bound(site);
      uint64_t t;
      while (pos >= (t = load_acquire_sys(tail)) + size && bound.tick(WaitOp::kFifoPush, pos, t)) {
      }
      fence_acq_rel_sys();
      atomicMax(reinterpret_cast<unsigned long long*>(tail_cache), static_cast<unsigned long long>(t));
    }
    ProxyTrigger* slot = &slots[pos % size];
    store_relaxed_sys(&slot->fst, trigger.fst);
    __threadfence_system();
    store_relaxed_sys(&slot->snd, trigger.snd);
    return pos;
  }

  // Spins (bounded) until the proxy has consumed position `pos` (and all before it). Acquire.
  JAX_MSCCLPP_DEVICE_INLINE void sync(uint64_t pos) const {
    SpinBound bound(site);
    uint64_t t;
    while ((t = load_acquire_sys(tail)) <= pos && bound.tick(WaitOp::kFifoSync, pos, t)) {
    }
  }
#endif
};

}  // namespace jax_mscclpp
