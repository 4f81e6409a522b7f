// PortChannel: data moves by DMA (cudaMemcpyAsync on a proxy stream), requested by one GPU thread through
// the proxy FIFO (fifo.cuh). Every method is called by ONE thread; make the data a put reads visible to that
// thread first (e.g. __syncthreads() after the block wrote it), the push fence does the rest.
//
// Ordering the proxy gives (runtime/gpu/proxy.h): triggers of one channel are handled in FIFO order on one
// stream, so a signal is written to the peer after the data of every earlier put of that channel has landed;
// flush returns once every earlier copy of the channel has completed.
//
// The proxy addresses memory by channel: dst is the peer's registered buffer, src is the local buffer named
// when the channel was built. Offsets and sizes travel as 32-bit fields; larger puts are split.
#pragma once

#include <cstdint>

#include "fifo.cuh"
#include "semaphore.cuh"

namespace jax_mscclpp {

struct PortChannelDeviceHandle {
  FifoDeviceHandle fifo;
  H2DSemaphoreDeviceHandle semaphore;  // signals from the peer's proxy arrive here
  uint32_t channel_id;                 // index in the proxy's channel table

#if defined(__CUDACC__)
  static constexpr uint64_t kMaxChunk = 1ull << 31;

  // Asks the proxy to copy local[src_off, +bytes) to remote[dst_off, +bytes). Returns the position of the
  // last trigger pushed. `extra` (signal / flush bits) rides on the last chunk.
  JAX_MSCCLPP_DEVICE_INLINE uint64_t put_chunks(uint64_t dst_off, uint64_t src_off, uint64_t bytes,
                                                uint32_t extra) const {
    uint64_t pos = 0;
    do {
      const uint64_t n = bytes > kMaxChunk ? kMaxChunk : bytes;
      const uint32_t type = (n == bytes ? (kTriggerPut | extra) : kTriggerPut);
      pos = fifo.push(make_trigger(type, channel_id, static_cast<uint32_t>(dst_off), static_cast<uint32_t>(src_off),
                                   static_cast<uint32_t>(n)));
      dst_off += n;
      src_off += n;
      bytes -= n;
    } while (bytes != 0);
    return pos;
  }

  JAX_MSCCLPP_DEVICE_INLINE void put(uint64_t dst_off, uint64_t src_off, uint64_t bytes) const {
    put_chunks(dst_off, src_off, bytes, 0);
  }
  // The peer's wait() returns after every earlier put of this channel has landed.
  JAX_MSCCLPP_DEVICE_INLINE void signal() const { fifo.push(make_trigger(kTriggerSignal, channel_id, 0, 0, 0)); }
  JAX_MSCCLPP_DEVICE_INLINE void put_with_signal(uint64_t dst_off, uint64_t src_off, uint64_t bytes) const {
    put_chunks(dst_off, src_off, bytes, kTriggerSignal);
  }
  // Like put_with_signal, then waits until the proxy has completed the copy (the source may be reused).
  JAX_MSCCLPP_DEVICE_INLINE void put_with_signal_and_flush(uint64_t dst_off, uint64_t src_off,
                                                           uint64_t bytes) const {
    fifo.sync(put_chunks(dst_off, src_off, bytes, kTriggerSignal | kTriggerFlush));
  }
  // Returns once every earlier copy of this channel has completed (data is in the peer's memory).
  JAX_MSCCLPP_DEVICE_INLINE void flush() const { fifo.sync(fifo.push(make_trigger(kTriggerFlush, channel_id, 0, 0, 0))); }
  // Acquire: waits (bounded) for the peer's next signal.
  JAX_MSCCLPP_DEVICE_INLINE void wait() const { semaphore.wait(); }
  JAX_MSCCLPP_DEVICE_INLINE bool poll() const { return semaphore.poll(); }
#endif
};

}  // namespace jax_mscclpp
