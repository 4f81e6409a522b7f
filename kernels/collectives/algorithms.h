// The collective algorithms behind launch_collective (collective.h), each a kernel plus a raw-pointer launcher
// that issues ONE launch (one epoch); collective.cu picks the launcher, and for the LL, ring and switch
// algorithms cuts a call into pieces that fit the scratch. Sizes and grids depend only on (sizes, nranks,
// scratch size, channels per peer, stream blocks), the same on every rank, so every rank issues the same launches
// with the same grids.
//
//   launcher                      collectives                              protocol
//   launch_all_reduce_1pa_ll      all_reduce (1PA-LL)                      LL16 packets, one phase
//   launch_all_pairs_reduce_ll    all_reduce (2PA-LL), reduce_scatter      LL16 packets, no semaphores
//   launch_all_pairs_copy_ll      all_gather, all_to_all                   LL16 packets
//   launch_stream_reduce          all_reduce (1PA-HB), reduce_scatter      streaming HB (stream.cuh): chunk slots,
//                                                                          a signal and a credit per chunk
//   launch_stream_copy            all_gather, all_to_all                   streaming HB
//   launch_stream_two_phase       all_reduce (2PA-HB)                      streaming HB, reduce then copy
//   launch_all_reduce_ring        all_reduce (2PR)                         PortChannel DMA, one ring per block
//   launch_all_reduce_switch      all_reduce (2PA-NVLS)                    SwitchChannel reduce/broadcast + barriers
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "collectives/collective.h"
#include "collectives/collective_common.cuh"
#include "collectives/stream.cuh"

namespace jax_mscclpp::collectives {

constexpr int kLLThreads = 256;
constexpr int kLLMaxBlocks = 16;
constexpr int k1paLLThreads = 512;
constexpr uint64_t k1paLLBytesPerBlock = 4 << 10;
constexpr int kHBThreads = 512;
constexpr int kHBMaxBlocks = 32;
constexpr int kRingMaxBlocks = 8;

// Blocks for `work` bytes handled per rank at `per_block` bytes each, between 1 and `cap`.
inline int blocks_for(uint64_t work, uint64_t per_block, int cap) {
  uint64_t b = ceil_div(work, per_block);
  if (b < 1) b = 1;
  return static_cast<int>(b < static_cast<uint64_t>(cap) ? b : cap);
}

// Largest piece (bytes of one block per launch) each piecewise algorithm fits into the scratch; 0 when none fits.
uint64_t piece_cap_1pa_ll(int nranks, const ScratchLayout& s);
// The smallest scratch in which 1PA-LL runs `bytes` in one launch; 0 when no scratch can (the LL halves are capped).
uint64_t all_reduce_1pa_ll_scratch_bytes(uint64_t bytes, int nranks);
uint64_t piece_cap_reduce_ll(int32_t collective, int nranks, const ScratchLayout& s);
uint64_t piece_cap_copy_ll(int nranks, const ScratchLayout& s);
uint64_t piece_cap_ring(int nranks, const ScratchLayout& s);
uint64_t piece_cap_switch(int nranks, const ScratchLayout& s);

// `collective` is a Collective code (ffi/collective_types.h); dtype/op codes of reduce.cuh. blocks / threads
// <= 0 pick the grid from the size (tests and benchmarks may force one).
cudaError_t launch_all_reduce_1pa_ll(const CollectiveContext& c, const Piece& p, int32_t dtype, int32_t op,
                                     cudaStream_t stream, int blocks = 0, int threads = 0);
cudaError_t launch_all_pairs_reduce_ll(const CollectiveContext& c, const Piece& p, int32_t collective, int32_t dtype,
                                       int32_t op, cudaStream_t stream);
cudaError_t launch_all_pairs_copy_ll(const CollectiveContext& c, const Piece& p, int32_t collective,
                                     cudaStream_t stream);
cudaError_t launch_stream_reduce(const CollectiveContext& c, const StreamArgs& a, int32_t dtype, int32_t op,
                                 cudaStream_t stream);
cudaError_t launch_stream_copy(const CollectiveContext& c, const StreamArgs& a, cudaStream_t stream);
cudaError_t launch_stream_two_phase(const CollectiveContext& c, const StreamArgs& reduce, const StreamArgs& gather,
                                    int32_t dtype, int32_t op, cudaStream_t stream);
cudaError_t launch_all_reduce_ring(const CollectiveContext& c, const Piece& p, int32_t dtype, int32_t op,
                                   cudaStream_t stream);
cudaError_t launch_all_reduce_switch(const CollectiveContext& c, const Piece& p, int32_t dtype, int32_t op,
                                     cudaStream_t stream);

// Collective codes as used by the kernels (the values of ffi/collective_types.h's Collective).
constexpr int32_t kAllReduceCode = 0;
constexpr int32_t kAllGatherCode = 1;
constexpr int32_t kReduceScatterCode = 2;
constexpr int32_t kAllToAllCode = 3;

}  // namespace jax_mscclpp::collectives
