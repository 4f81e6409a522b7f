// The collective algorithms behind launch_collective (collective.h): each a kernel plus its launcher, both in
// the kernel's .cu file. The launcher of the codes.def row `kName` is the function launcher_kName (declared below
// for every row); collective.cu finds it by the algorithm code, so a new algorithm is a .cu file here and a row of
// codes.def (docs/architecture.md, "Adding things").
//
// One launch convention for all: a Launcher says how large a piece of a call one launch (one epoch) handles, and
// issues the launch of one piece. launch_collective cuts a call into pieces of at most piece_cap bytes per block;
// a streaming launcher (stream.cuh) answers the whole block (one launch whatever the size) or 0. Sizes and grids
// depend only on (sizes, nranks, scratch size, channels per peer, stream blocks), the same on every rank, so
// every rank issues the same launches with the same grids.
//
//   file                  algorithm (codes.def)                      protocol
//   all_reduce_1pa_ll.cu  kOnePhaseAllPairsLL: all_reduce            LL16 packets, one phase
//   all_pairs_ll.cu       kTwoPhaseAllPairsLL: all_reduce;           LL16 packets, no semaphores
//                         kAllPairsLL: the others; kAllPairs: LL for small blocks, else kAllPairsHB
//   all_pairs_stream.cu   kOnePhaseAllPairsHB, kTwoPhaseAllPairsHB:  streaming HB (stream.cuh): chunk slots,
//                         all_reduce; kAllPairsHB: the others       a signal and a credit per chunk
//   all_reduce_ring.cu    kTwoPhaseRing: all_reduce                  PortChannel DMA, one ring per block
//   all_reduce_switch.cu  kTwoPhaseNvls: all_reduce                  SwitchChannel reduce/broadcast + barriers
//   permute.cu            kPointToPoint(LL, HB): permute             LL16 packets, or streaming HB to one peer
//   in_place.cu           kInPlace: all_reduce, reduce_scatter,      peers' buffers read and written in place,
//                         all_gather, all_to_all (launch_in_place,   a barrier before and after; posted buffers:
//                         and launch_collective's posted buffers)    each rank's addresses in its scratch
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "collectives/collective.h"
#include "collectives/collective_common.cuh"
#include "collectives/protocol.h"
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

// What one launch needs besides the context and its piece. Codes of codes.def.
struct LaunchArgs {
  int32_t collective;
  int32_t dtype;
  int32_t op;          // ignored by all_gather and all_to_all
  int32_t max_blocks;  // > 0: caps the streaming kernels' grid below ctx.stream_blocks (collective.h)
  int32_t send_to = -1;    // kPermute: the rank this one sends to (-1: none)
  int32_t recv_from = -1;  // kPermute: the rank this one receives from (-1: none, zeros)
};

struct Launcher {
  // The largest piece (bytes of one block) one launch handles for blocks of `block_bytes` over `nranks` ranks
  // in a scratch of `scratch_bytes`; 0 when none fits (the call cannot run).
  uint64_t (*piece_cap)(int32_t collective, int nranks, uint64_t block_bytes, uint64_t scratch_bytes,
                        const StreamTuning& tuning);
  // cudaErrorNotReady when the context lacks what the kernel needs for blocks of `block_bytes` (port channels, a
  // usable SwitchChannel, stream semaphores), asked before the first launch of a call; null: nothing beyond
  // what launch_collective checks (memory channels, the epoch).
  cudaError_t (*ready)(const CollectiveContext& c, uint64_t block_bytes);
  // Issues the launch of one piece (bytes [p.lo, p.lo + p.len) of every block).
  cudaError_t (*launch)(const CollectiveContext& c, const Piece& p, const LaunchArgs& a, cudaStream_t stream);
};

// The launcher of algorithm `enumerator` (codes.def) for a call (its collective, block bytes, world and placement:
// what a size-chosen algorithm's protocol rows read, protocol.h): null when the algorithm does not implement that
// collective. kPlan has none (the plan executor runs it, kernels/executor/).
#define JAX_MSCCLPP_LAUNCHER(enumerator) const Launcher* launcher_##enumerator(const ProtocolCall& call)

#define JAX_MSCCLPP_ALGORITHM(enumerator, ...) JAX_MSCCLPP_LAUNCHER(enumerator);
#include "jax_mscclpp/codes.def"

// The smallest scratch in which 1PA-LL runs `bytes` in one launch; 0 when no scratch can (the LL halves are capped).
uint64_t all_reduce_1pa_ll_scratch_bytes(uint64_t bytes, int nranks);

}  // namespace jax_mscclpp::collectives
