// LL ("low latency") packets: data and flag travel in the same store, so a reader that sees the flag of
// this call sees the data next to it; no separate signal is needed.
//
//   LL8  = {4 B data, 4 B flag}, written with one 8-byte store.
//   LL16 = {4 B data, 4 B flag, 4 B data, 4 B flag}, written with one 16-byte store. A 16-byte access may
//          reach memory as two 8-byte halves, so each half carries the flag and the reader checks both.
//
// Flags come from the device-side epoch (this call's epoch, truncated to 32 bits; never 0 because epochs
// start at 1). A packet buffer must not be rewritten with the same flag while a reader may still be
// looking at it: callers keep two halves chosen by epoch parity, so the previous content of a slot always
// carries a different flag (epoch - 2) from the one being waited for.
#pragma once

#include <cstddef>
#include <cstdint>

#include "atomics.cuh"
#include "error_record.cuh"

namespace jax_mscclpp {

struct alignas(8) LL8Packet {
  uint32_t data;
  uint32_t flag;

  static constexpr uint32_t kPayloadBytes = 4;

#if defined(__CUDACC__)
  using Payload = uint32_t;

  JAX_MSCCLPP_DEVICE_INLINE void write(uint32_t value, uint32_t f) {
    asm volatile("st.volatile.v2.u32 [%0], {%1, %2};" ::"l"(this), "r"(value), "r"(f) : "memory");
  }

  // One look: true (and the data) if this packet carries flag `f`.
  JAX_MSCCLPP_DEVICE_INLINE bool poll(uint32_t f, uint32_t& value) const {
    uint32_t d, g;
    asm volatile("ld.volatile.v2.u32 {%0, %1}, [%2];" : "=r"(d), "=r"(g) : "l"(this) : "memory");
    value = d;
    return g == f;
  }

  // Bounded spin until the packet carries flag `f`.
  JAX_MSCCLPP_DEVICE_INLINE uint32_t read(uint32_t f, const WaitSite& site) const {
    uint32_t value;
    SpinBound bound(site);
    while (!poll(f, value) && bound.tick(WaitOp::kPacketRead, f, 0)) {
    }
    return value;
  }
#endif
};

struct alignas(16) LL16Packet {
  uint32_t data0;
  uint32_t flag0;
  uint32_t data1;
  uint32_t flag1;

  static constexpr uint32_t kPayloadBytes = 8;

#if defined(__CUDACC__)
  using Payload = uint2;

  JAX_MSCCLPP_DEVICE_INLINE void write(uint2 value, uint32_t f) {
    asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(this), "r"(value.x), "r"(f), "r"(value.y),
                 "r"(f)
                 : "memory");
  }

  JAX_MSCCLPP_DEVICE_INLINE bool poll(uint32_t f, uint2& value) const {
    uint32_t d0, f0, d1, f1;
    asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                 : "l"(this)
                 : "memory");
    value = make_uint2(d0, d1);
    return f0 == f && f1 == f;
  }

  JAX_MSCCLPP_DEVICE_INLINE uint2 read(uint32_t f, const WaitSite& site) const {
    uint2 value;
    SpinBound bound(site);
    while (!poll(f, value) && bound.tick(WaitOp::kPacketRead, f, 0)) {
    }
    return value;
  }
#endif
};

// Bytes of packet buffer needed to carry `bytes` of data.
template <class Packet>
JAX_MSCCLPP_HOST_DEVICE_INLINE size_t packet_buffer_bytes(size_t bytes) {
  return (bytes + Packet::kPayloadBytes - 1) / Packet::kPayloadBytes * sizeof(Packet);
}

#if defined(__CUDACC__)
namespace detail {

template <class Payload>
JAX_MSCCLPP_DEVICE_INLINE Payload gather_payload(const unsigned char* src, uint32_t n) {
  Payload p{};
  unsigned char* b = reinterpret_cast<unsigned char*>(&p);
  for (uint32_t i = 0; i < n; ++i) b[i] = src[i];
  return p;
}

template <class Payload>
JAX_MSCCLPP_DEVICE_INLINE void scatter_payload(unsigned char* dst, const Payload& p, uint32_t n) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&p);
  for (uint32_t i = 0; i < n; ++i) dst[i] = b[i];
}

}  // namespace detail

// Packs `bytes` from `src` into packets at `dst` (usually a peer's packet buffer) with flag `flag`,
// spreading packets over threads [tid, nthreads). Any size and alignment (a last partial packet is zero
// padded). No fence is needed: each packet is its own signal.
template <class Packet>
JAX_MSCCLPP_DEVICE_INLINE void put_packets(Packet* dst, const void* src, size_t bytes, uint32_t flag, uint32_t tid,
                                           uint32_t nthreads) {
  using Payload = typename Packet::Payload;
  constexpr uint32_t P = Packet::kPayloadBytes;
  const unsigned char* s = static_cast<const unsigned char*>(src);
  const size_t full = bytes / P;
  if (reinterpret_cast<uintptr_t>(src) % P == 0) {
    const Payload* sv = reinterpret_cast<const Payload*>(src);
    for (size_t i = tid; i < full; i += nthreads) dst[i].write(sv[i], flag);
  } else {
    for (size_t i = tid; i < full; i += nthreads) dst[i].write(detail::gather_payload<Payload>(s + i * P, P), flag);
  }
  const uint32_t rem = static_cast<uint32_t>(bytes - full * P);
  if (rem != 0 && tid == full % nthreads) dst[full].write(detail::gather_payload<Payload>(s + full * P, rem), flag);
}

// Waits (bounded) for `bytes` of data carried by packets at `src` (this rank's packet buffer) with flag
// `flag`, and writes it to `dst`. Same thread split and size rules as put_packets.
template <class Packet>
JAX_MSCCLPP_DEVICE_INLINE void read_packets(void* dst, const Packet* src, size_t bytes, uint32_t flag, uint32_t tid,
                                            uint32_t nthreads, const WaitSite& site) {
  using Payload = typename Packet::Payload;
  constexpr uint32_t P = Packet::kPayloadBytes;
  unsigned char* d = static_cast<unsigned char*>(dst);
  const size_t full = bytes / P;
  if (reinterpret_cast<uintptr_t>(dst) % P == 0) {
    Payload* dv = reinterpret_cast<Payload*>(dst);
    for (size_t i = tid; i < full; i += nthreads) dv[i] = src[i].read(flag, site);
  } else {
    for (size_t i = tid; i < full; i += nthreads) detail::scatter_payload(d + i * P, src[i].read(flag, site), P);
  }
  const uint32_t rem = static_cast<uint32_t>(bytes - full * P);
  if (rem != 0 && tid == full % nthreads) detail::scatter_payload(d + full * P, src[full].read(flag, site), rem);
}

#endif  // __CUDACC__

}  // namespace jax_mscclpp
