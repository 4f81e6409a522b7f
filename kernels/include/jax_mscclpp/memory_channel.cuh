// MemoryChannel: GPU threads move data themselves through peer memory (NVLink / PCIe peer access, or CUDA
// IPC mappings); synchronization is a device-to-device semaphore.
//
// One handle describes one direction-agnostic link from this rank to one peer:
//   remote  : the peer's registered buffer (its scratch), mapped here. put/put_packets/write target it;
//             get/read read from it.
//   local   : this rank's buffer that offset-based put() reads from and get() writes to.
//   packets : this rank's own registered buffer into which the peer's put_packets land; read_packets
//             reads it.
//
// Protocols (docs/architecture.md, "Protocols"):
//   HB: put (many threads) -> barrier over those threads -> one thread signal(); receiver wait() -> read.
//   LL: put_packets with this call's flag; receiver read_packets with the same flag. No signal: the flag of
//       each 8-byte word is its own signal. Callers alternate packet-buffer halves by epoch parity.
// Offsets are in bytes. A handle is plain data, copied to the GPU by the host (runtime/gpu/rank_context.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "copy.cuh"
#include "packet.cuh"
#include "reduce.cuh"
#include "semaphore.cuh"

namespace jax_mscclpp {

struct MemoryChannelDeviceHandle {
  D2DSemaphoreDeviceHandle semaphore;
  char* remote;
  char* local;
  char* packets;

#if defined(__CUDACC__)
  // ---- HB data movement (weak stores; publish with signal() after a barrier over the copying threads) ----

  // remote[dst_off, +bytes) <- local[src_off, +bytes), threads [tid, nthreads).
  JAX_MSCCLPP_DEVICE_INLINE void put(uint64_t dst_off, uint64_t src_off, uint64_t bytes, uint32_t tid,
                                     uint32_t nthreads) const {
    copy_bytes(remote + dst_off, local + src_off, bytes, tid, nthreads);
  }
  // remote[dst_off, +bytes) <- src (any local device pointer, e.g. an XLA input buffer).
  JAX_MSCCLPP_DEVICE_INLINE void put_from(uint64_t dst_off, const void* src, uint64_t bytes, uint32_t tid,
                                          uint32_t nthreads) const {
    copy_bytes(remote + dst_off, src, bytes, tid, nthreads);
  }
  // local[dst_off, +bytes) <- remote[src_off, +bytes). The peer must have published the data (signal/wait).
  JAX_MSCCLPP_DEVICE_INLINE void get(uint64_t src_off, uint64_t dst_off, uint64_t bytes, uint32_t tid,
                                     uint32_t nthreads) const {
    copy_bytes(local + dst_off, remote + src_off, bytes, tid, nthreads);
  }
  // dst (any local device pointer) <- remote[src_off, +bytes).
  JAX_MSCCLPP_DEVICE_INLINE void get_to(void* dst, uint64_t src_off, uint64_t bytes, uint32_t tid,
                                        uint32_t nthreads) const {
    copy_bytes(dst, remote + src_off, bytes, tid, nthreads);
  }

  // remote[dst_off + i] = srcs[0][i] (op) ... (op) srcs[nsrc-1][i]: local buffers reduced in registers and
  // written straight to the peer. `count` is in elements of T.
  template <class T, class Op>
  JAX_MSCCLPP_DEVICE_INLINE void reduce_put(uint64_t dst_off, const T* const* srcs, int nsrc, uint64_t count,
                                            uint32_t tid, uint32_t nthreads) const {
    reduce_elements<T, Op>(reinterpret_cast<T*>(remote + dst_off), srcs, nsrc, count, tid, nthreads);
  }

  // Single elements of the peer's buffer (weak accesses; order them with signal/wait like any put).
  template <class T>
  JAX_MSCCLPP_DEVICE_INLINE void write(uint64_t off, const T& value) const {
    *reinterpret_cast<T*>(remote + off) = value;
  }
  template <class T>
  JAX_MSCCLPP_DEVICE_INLINE T read(uint64_t off) const {
    return *reinterpret_cast<const volatile T*>(remote + off);
  }

  // ---- synchronization (see semaphore.cuh for the ordering each gives) ----
  JAX_MSCCLPP_DEVICE_INLINE void signal() const { semaphore.signal(); }
  JAX_MSCCLPP_DEVICE_INLINE void relaxed_signal() const { semaphore.relaxed_signal(); }
  JAX_MSCCLPP_DEVICE_INLINE void wait() const { semaphore.wait(); }
  JAX_MSCCLPP_DEVICE_INLINE void relaxed_wait() const { semaphore.relaxed_wait(); }
  JAX_MSCCLPP_DEVICE_INLINE bool poll() const { return semaphore.poll(); }

  // Fused put + signal. Block-wide: every thread of the block calls it with tid = threadIdx.x and
  // nthreads = blockDim.x; thread 0 signals after a __syncthreads(), so the peer's wait() covers the whole
  // block's copy.
  JAX_MSCCLPP_DEVICE_INLINE void put_with_signal(uint64_t dst_off, uint64_t src_off, uint64_t bytes) const {
    put(dst_off, src_off, bytes, threadIdx.x, blockDim.x);
    __syncthreads();
    if (threadIdx.x == 0) signal();
  }

  // ---- LL data movement ----

  // Peer's packet buffer at byte offset dst_off <- `bytes` of src as packets carrying `flag`.
  template <class Packet = LL16Packet>
  JAX_MSCCLPP_DEVICE_INLINE void put_packets(uint64_t dst_off, const void* src, uint64_t bytes, uint32_t flag,
                                             uint32_t tid, uint32_t nthreads) const {
    jax_mscclpp::put_packets(reinterpret_cast<Packet*>(remote + dst_off), src, bytes, flag, tid, nthreads);
  }
  // dst <- `bytes` of data carried by packets at byte offset packet_off of this rank's packet buffer;
  // spins (bounded) until each packet carries `flag`.
  template <class Packet = LL16Packet>
  JAX_MSCCLPP_DEVICE_INLINE void read_packets(void* dst, uint64_t packet_off, uint64_t bytes, uint32_t flag,
                                              uint32_t tid, uint32_t nthreads) const {
    jax_mscclpp::read_packets(dst, reinterpret_cast<const Packet*>(packets + packet_off), bytes, flag, tid, nthreads,
                              semaphore.site);
  }
#endif
};

}  // namespace jax_mscclpp
