#include "collectives/all_reduce_1pa_ll.h"

#include "collectives/collective_common.cuh"

#include "jax_mscclpp/packet.cuh"
#include "jax_mscclpp/reduce.cuh"

namespace jax_mscclpp {
namespace {

constexpr uint64_t kPayload = LL16Packet::kPayloadBytes;

__host__ __device__ inline uint64_t slot_bytes(uint64_t bytes) {
  return (packet_buffer_bytes<LL16Packet>(bytes) + 15) / 16 * 16;
}

template <class T, class Op>
__global__ void __launch_bounds__(1024)
    all_reduce_1pa_ll_kernel(AllReduce1paLLArgs a, const char* __restrict__ in, char* __restrict__ out, uint64_t bytes) {
  const int r = a.rank, n = a.nranks, cpp = a.channels_per_peer;
  const uint64_t e = launch_epoch(a.epoch);
  const uint32_t flag = static_cast<uint32_t>(e);
  const uint64_t slot = slot_bytes(bytes);
  const uint64_t half = (e & 1) * (a.half_bytes != 0 ? a.half_bytes : n * slot);

  // This block's part of the message, in whole 16-byte units (two packets), the same split on every rank.
  uint64_t chunk = (bytes + gridDim.x - 1) / gridDim.x;
  chunk = (chunk + 15) / 16 * 16;
  const uint64_t lo = blockIdx.x * chunk < bytes ? blockIdx.x * chunk : bytes;
  const uint64_t hi = lo + chunk < bytes ? lo + chunk : bytes;
  const uint64_t first_packet = lo / kPayload;

  // 1. My part, as packets, into my slot of every peer's scratch.
  for (int k = 1; k < n; ++k) {
    const int q = (r + k) % n;
    a.channels[q * cpp].put_packets<LL16Packet>(half + r * slot + first_packet * sizeof(LL16Packet), in + lo, hi - lo,
                                                flag, threadIdx.x, blockDim.x);
  }

  // 2. Reduce packet by packet, in rank order, with 8 bytes of my own input in place of my slot.
  const uint64_t npackets = (hi - lo + kPayload - 1) / kPayload;
  for (uint64_t i = threadIdx.x; i < npackets; i += blockDim.x) {
    const uint64_t off = lo + i * kPayload;
    const uint32_t valid = bytes - off < kPayload ? static_cast<uint32_t>(bytes - off) : kPayload;
    uint2 mine = make_uint2(0, 0);
    if (valid == kPayload && (reinterpret_cast<uintptr_t>(in + off) & 7) == 0) {
      mine = *reinterpret_cast<const uint2*>(in + off);
    } else {
      unsigned char* m = reinterpret_cast<unsigned char*>(&mine);
      for (uint32_t j = 0; j < valid; ++j) m[j] = static_cast<unsigned char>(in[off + j]);
    }
    VecAccumulator<T, Op> acc;
    for (int q = 0; q < n; ++q) {
      uint2 v = mine;
      if (q != r) {
        const LL16Packet* pk =
            reinterpret_cast<const LL16Packet*>(a.scratch + half + q * slot) + first_packet + i;
        v = pk->read(flag, a.channels[q * cpp].semaphore.site);
      }
      const uint4 wide = make_uint4(v.x, v.y, 0, 0);  // the upper 8 bytes ride along unused
      if (q == 0) {
        acc.init(wide);
      } else {
        acc.add(wide);
      }
    }
    const uint4 res = acc.result();
    if (valid == kPayload && (reinterpret_cast<uintptr_t>(out + off) & 7) == 0) {
      *reinterpret_cast<uint2*>(out + off) = make_uint2(res.x, res.y);
    } else {
      const unsigned char* s = reinterpret_cast<const unsigned char*>(&res);
      for (uint32_t j = 0; j < valid; ++j) out[off + j] = static_cast<char>(s[j]);
    }
  }

  // 3. The last block to finish publishes the next epoch.
  publish_epoch(a.epoch, a.blocks_done, e);
}

}  // namespace

size_t all_reduce_1pa_ll_scratch_bytes(size_t bytes, int nranks) { return 2 * static_cast<size_t>(nranks) * slot_bytes(bytes); }

cudaError_t launch_all_reduce_1pa_ll(const AllReduce1paLLArgs& args, const void* in, void* out, size_t count,
                                     int32_t dtype, int32_t op, int blocks, int threads, cudaStream_t stream) {
  const size_t esize = dtype_bytes(dtype);
  if (esize == 0) return cudaErrorInvalidValue;
  const size_t bytes = count * esize;
  const size_t need = all_reduce_1pa_ll_scratch_bytes(bytes, args.nranks);
  if (args.half_bytes != 0 ? (need / 2 > args.half_bytes || 2 * args.half_bytes > args.scratch_bytes)
                           : need > args.scratch_bytes)
    return cudaErrorInvalidValue;
  if (threads <= 0) threads = 256;
  if (blocks <= 0) {
    // About 8 KiB of message per block, a few blocks at most: the kernel is latency-bound.
    blocks = static_cast<int>((bytes + 8191) / 8192);
    if (blocks < 1) blocks = 1;
    if (blocks > 16) blocks = 16;
  }
  cudaError_t result = cudaSuccess;
  const bool known = collectives::dispatch_reduction(dtype, op, [&](auto t, auto o) {
    using T = decltype(t);
    using Op = decltype(o);
    all_reduce_1pa_ll_kernel<T, Op><<<blocks, threads, 0, stream>>>(args, static_cast<const char*>(in),
                                                                     static_cast<char*>(out), bytes);
    result = cudaGetLastError();
  });
  return known ? result : cudaErrorInvalidValue;
}

}  // namespace jax_mscclpp
