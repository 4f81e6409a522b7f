// The one entry point of the collective library on the GPU: a rank's device resources (CollectiveContext,
// built once per communicator and passed by value) and launch_collective(), which the CUDA FFI handler calls
// with raw pointers. No XLA types here.
//
// Buffers hold blocks of block_count elements as the collective's block layout says (jax_mscclpp/block_layout.h):
//   all_reduce in[n] -> out[n]; all_gather in[n] -> out[world][n]; reduce_scatter in[world][n] -> out[n];
//   all_to_all in[world][n] -> out[world][n]; permute in[n] -> out[n] (launch_permute).
// Every launch reads this call's epoch from ctx.epoch (device memory), uses epoch + 1 as its flag and scratch
// half, and its blocks store the new count at their end (jax_mscclpp/epoch.cuh): a launch sequence can be captured once and replayed (CUDA graphs,
// XLA command buffers). Messages larger than one round of scratch are pipelined: launch_collective issues as
// many launches (each one epoch) as needed, the number depending only on the sizes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "collectives/p2p_layout.h"
#include "collectives/protocol.h"
#include "jax_mscclpp/call_check.cuh"
#include "jax_mscclpp/memory_channel.cuh"
#include "jax_mscclpp/port_channel.cuh"
#include "jax_mscclpp/switch_channel.cuh"

namespace jax_mscclpp {

// Peers whose scratch a kernel finds in its arguments (CollectiveContext::peer_scratch) rather than in the
// channel table in device memory: the latency-bound kernels store to a peer without a dependent load first.
constexpr int kDirectPeers = 16;

// The streaming kernels' geometry knobs (collectives/stream.cuh), the same on every rank of a communicator: the
// runtime fills them from JAX_MSCCLPP_STREAM_{BLOCK_BYTES,CHUNK,SLOTS} (settings.def) when it creates a rank; the
// kernels read no setting themselves.
struct StreamTuning {
  uint64_t block_bytes;  // a block per this many bytes of a segment, up to the context's stream_blocks
  uint64_t max_chunk;    // largest chunk, bytes (a multiple of 16)
  int32_t slots;         // slots per (peer, block)
};

// The outputs a launch poisons should its rank have failed by the launch's end (collectives/failed_outputs.cuh):
// where a rank's failing kernels stop rather than trap (jax_mscclpp/error_record.cuh), its call entry sets them
// for each call (runtime/gpu/call.h), so that the outputs of a failed call, and of every call after it, cannot pass
// for results: every block of the call's kernel, after its last write of them, reads the rank's failed word
// (jax_mscclpp/call_inbox.cuh) and, set, sets every bit of every region (NaN in every floating type). The
// kernel does it itself: no launch is added to the call. `failed` null (trap mode, the default): nothing is
// poisoned and no block reads the word. A region with bytes 0 is none.
constexpr int kFailedOutputRegions = 2;
struct FailedOutputs {
  const uint64_t* failed;  // the rank's failed word, or null
  char* out[kFailedOutputRegions];
  uint64_t bytes[kFailedOutputRegions];
};

struct CollectiveContext {
  int32_t rank;
  int32_t nranks;
  int32_t placement;                     // codes.def: kOwnGpu, or kSharedGpu where ranks share a GPU (the protocol rows)
  int32_t channels_per_peer;
  int32_t stream_blocks;                 // most thread blocks a streaming kernel may use (0: none)
  StreamTuning stream_tuning;
  char* scratch;                         // registered scratch of this rank (every region)
  uint64_t scratch_bytes;
  const MemoryChannelDeviceHandle* mem;  // device array [nranks * channels_per_peer]; entry p*cpp + c reaches p
  const PortChannelDeviceHandle* port;   // device array [nranks * channels_per_peer], or null (no proxy)
  SwitchChannelDeviceHandle sw;          // emulated over every rank's scratch (hardware multicast: opt-in only)
  // Device array [nranks * stream_blocks * 2]: entry (p * stream_blocks + b) * 2 + kind is the semaphore pair with
  // peer p for block b, kind 0 "chunk written", kind 1 "slot consumed" (collectives/stream.cuh).
  const D2DSemaphoreDeviceHandle* stream;
  uint64_t* epoch;                       // the replicated epoch count (jax_mscclpp/epoch.cuh)
  char* peer_scratch[kDirectPeers];      // rank q's scratch as mapped here (q < min(nranks, kDirectPeers))
  // This launch's call (jax_mscclpp/call_inbox.cuh): set per launch by launch_collective, launch_plan and
  // launch_all_reduce_epilogue. Every rank's call inbox lies at call_inbox_offset(scratch_bytes) in its scratch.
  CallWords call;
  // The point-to-point engine (launch_p2p_group; collectives/p2p_layout.h): device array [nranks] of what this
  // rank holds of each peer (its own entry zero), or null: the context has no p2p resources. The layout is the
  // same on every rank; p2p_blocks is the most thread blocks one launch may use (all co-resident).
  const P2PPeerHandle* p2p;
  P2PLayout p2p_layout;
  int32_t p2p_blocks;
  // 1: every peer is a rank of this process and the direct exchange is on (RankOptions::direct_exchange): the
  // peers' device addresses are valid here, so the ranks may post their buffers to each other (kInPlace through
  // launch_collective, direct_algorithm; the ragged all-to-all's direct exchange decides per peer, P2PPeerHandle).
  int32_t direct;
  // Set per call by the call entry (FailedOutputs above); zero in the context a rank builds. Every kernel that ends
  // in the collectives' launch end (launch_collective's, launch_permute's, launch_in_place's, the plan executor's,
  // launch_all_reduce_epilogue's) and launch_ragged_all_to_all's poison out[] / bytes[]; launch_p2p_group's kernel
  // poisons the receives of its launch instead (its regions are ignored).
  FailedOutputs failed_outputs;
};

// Collective, algorithm, dtype and op codes: jax_mscclpp/codes.def (as int32_t: jax_mscclpp/codes.h).

// What the algorithms need from the context (kernels/README.md, "Collective kernels", has the table):
//   - mem: every entry p * cpp + c with p != rank (LL algorithms use c = 0 only; HB, NVLS and ring algorithms
//     run one block per channel index, so their grids have at most channels_per_peer blocks).
//   - port (2PR only): the same indexing, and every port channel's local buffer is this rank's scratch (the ring
//     stages its input there; the proxy copies between registered buffers only). Scratch below 4 GiB.
//   - sw (2PA-NVLS only): emulated (members = every rank's scratch, nranks <= 8) or hardware multicast over the
//     scratches (opt-in only; then 16-byte multiples and a (dtype, op) that multimem has).
//   - scratch: the same size on every rank. It is cut into [LL half 0 | LL half 1 | HB half 0 | HB half 1]
//     (LL halves a quarter of it each, at most 4 MiB); a launch of epoch e uses half e & 1 of its protocol's
//     region. All ranks must issue the same sequence of calls (collective, algorithm, sizes); a launch whose
//     peers run another call traps with a record naming both (call_check.cuh).
// in == out is allowed for all_reduce and all_to_all. block_count == 0 launches nothing. With nranks == 1 a call
// is a device copy (no kernel, no epoch).
//
// kInPlace (ctx.direct only): every rank posts its own input and output addresses on the device and the kernel reads
// its peers' inputs and writes their outputs where they are (launch_in_place's protocol, collectives/in_place.cu),
// with no scratch: one launch whatever the size. all_reduce and reduce_scatter (sum, max, min), all_gather and
// all_to_all; an all_to_all whose input and output overlap cannot run so (direct_algorithm keeps the scratch
// kernel for it). cudaErrorNotReady without ctx.direct.

// True when `algorithm` implements `collective` for this dtype/op on this build. (The op is ignored by
// all_gather and all_to_all.)
bool collective_supported(int32_t collective, int32_t algorithm, int32_t dtype, int32_t op);

// Launches (epochs) one call takes on a communicator of `nranks` ranks placed as `placement` (codes.def; what
// CollectiveContext::placement says): a function of the sizes alone. 0 when the call launches nothing (block_count
// 0, one rank) or cannot run (unsupported, or a scratch too small for even one piece).
uint64_t collective_launch_count(int32_t collective, int32_t algorithm, uint64_t block_count, int32_t dtype,
                                 int32_t nranks, int32_t placement, uint64_t scratch_bytes,
                                 const StreamTuning& tuning);

// Launches one call on `stream`. cudaErrorInvalidValue for an unsupported combination or a scratch too small for
// one piece; cudaErrorNotReady when the context lacks what the algorithm needs (e.g. port channels, an emulated
// or usable SwitchChannel). `max_blocks` > 0 caps the streaming kernels' grid below ctx.stream_blocks (a kernel
// that runs beside compute leaves it most multiprocessors).
cudaError_t launch_collective(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                              void* out, uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                              int32_t max_blocks = 0);

// Launches one call of the permutation (codes.def, kPermute; `algorithm` one of its algorithms) on `stream`: this
// rank sends its block (`in`, block_count elements of dtype) to rank `send_to` and receives into `out` the block of
// rank `recv_from` (-1: none, and `out` is zeroed, or left alone when null; the rank itself: a local copy). Every rank of the context makes
// the call, the same algorithm, dtype and block_count (the permutation may be any; each rank passes its own
// peers, which must agree across ranks: a rank sends to r exactly when r receives from it). Errors as
// launch_collective's; cudaErrorInvalidValue for a peer outside [-1, nranks).
cudaError_t launch_permute(const CollectiveContext& ctx, int32_t algorithm, const void* in, void* out,
                           uint64_t block_count, int32_t dtype, int32_t send_to, int32_t recv_from,
                           cudaStream_t stream, int32_t max_blocks = 0);

// One message of a point-to-point group (launch_p2p_group).
struct P2PMessage {
  char* buffer;     // send: the data to send (read only); receive: where the data lands. Any alignment.
  uint64_t bytes;   // may be 0 (nothing moves)
  int32_t peer;     // any rank of the context, the rank itself included (a local copy)
  int32_t receive;  // 0: send to peer; 1: receive from peer
};

// The most messages one launch takes: the messages travel by value in the kernel's parameters (16 bytes each,
// plus 12 bytes of per-(peer, direction) table in the worst case), and 1024 of them fit the 32 KB parameter space
// of sm_70+ with CUDA 12.1+. Splitting a larger group into several launches is not equivalent in general (the
// messages of one launch progress together, those of the next wait for it), so a caller must refuse a group
// that large rather than cut it.
constexpr int kP2PMaxMessages = 1024;

// Launches this rank's messages of one group on `stream` (NCCL's point-to-point semantics). Messages between a
// pair of ranks are matched in order per direction: the k-th send of rank a to rank b (counting over every
// launch of the communicator) pairs with the k-th receive of b from a, and the two have the same byte count. Only
// the ranks named take part: a rank with no message launches nothing, and no rank waits for a third one. All
// messages of one launch progress together (a send never waits for a receive of the same launch to finish
// first), so any pattern NCCL accepts in one group runs: rings, both directions between a pair, several messages
// to one peer, all-to-all-v, a rank sending to itself (the k-th self-send of a launch pairs with its k-th
// self-receive, copied with cudaMemcpyAsync before the kernel; they must be in the same launch; their buffers are
// the same or do not overlap). Buffers are the launch's until it ends on `stream`; then a send's buffer is free
// (its data is in the receiver's slots, perhaps not yet received) and a receive's holds the data. Capture-safe:
// no host state per call and no device buffer written by the host (CUDA graphs, XLA command buffers replay it).
// Errors (nothing is enqueued): cudaErrorInvalidValue for a peer out of range, a receive flag other than 0 / 1, a
// null buffer with bytes > 0, count < 0 or more than kP2PMaxMessages, unmatched self messages or self sizes that
// differ; cudaErrorNotReady when a message to another rank moves bytes and the context has no p2p resources.
// Launches: one kernel where a message to another rank moves bytes, none otherwise, plus a device copy per self
// pair that moves bytes. Where ctx.failed_outputs.failed is set, the kernel poisons every receive of the launch,
// the self receives included (FailedOutputs); self messages with no kernel are copies on this GPU, right whatever
// the rank's state, and are not poisoned.
// The protocol and why it cannot deadlock: docs/architecture.md, "Point-to-point groups".
cudaError_t launch_p2p_group(const CollectiveContext& ctx, const P2PMessage* messages, int count,
                             cudaStream_t stream);

// One rank's part of a ragged all-to-all (lax.ragged_all_to_all's semantics), every size and offset read on the
// device: for every rank j, rows [input_offsets[j], + send_sizes[j]) of `operand` land in rank j's `output` from
// row output_offsets[j] (this rank's entry of the sender's table says where, as in lax), and recv_sizes[j] is
// the rows this rank receives from j. Rows of `output` no rank writes keep their values. A row is `row_bytes`
// bytes (any alignment); the four tables are device arrays of nranks entries of `index_bytes` (4: int32, 8: int64).
struct RaggedAllToAll {
  const void* operand;
  uint64_t operand_rows;
  void* output;
  uint64_t output_rows;
  uint64_t row_bytes;
  const void* input_offsets;
  const void* send_sizes;
  const void* output_offsets;
  const void* recv_sizes;
  int32_t index_bytes;
};

// Launches this rank's part of one ragged all-to-all on `stream`: one kernel over the point-to-point engine's
// rings and counters (collectives/p2p_layout.h), every pair of ranks exchanging whatever rows it has, the
// sender's output offset and row count travelling in front of each lane's first chunk (collectives/
// ragged_all_to_all.cu states the protocol); with a peer of this process (P2PPeerHandle::direct) the rows go
// straight into the receiver's output instead, posted at its launch's start. Every rank of the context makes the
// call (a pair with no rows still exchanges its header, or its post and report). Capture-safe: the host reads no size. What only the device can see is a failed call with
// the rank's error record naming the peer (WaitOp kRaggedBounds: rows outside operand or output, or a negative size
// or offset; kRaggedSizes: the rows a peer sent differ from recv_sizes), after which the kernel still keeps the
// protocol, moving nothing out of bounds. Errors (nothing is enqueued): cudaErrorInvalidValue for null tables, an
// index width other than 4 or 8, row_bytes 0, or null buffers with rows; cudaErrorNotReady when nranks > 1 and
// the context has no p2p resources or slots under 32 bytes. With nranks == 1 the kernel is the local copy.
cudaError_t launch_ragged_all_to_all(const CollectiveContext& ctx, const RaggedAllToAll& call, cudaStream_t stream);

// The buffers of a call served in place (launch_in_place), as mapped in this process: rank q's input and output.
struct InPlaceBuffers {
  const char* in[kDirectPeers];
  char* out[kDirectPeers];
};

// True when launch_in_place runs `collective` (all_reduce, reduce_scatter: sum, max, min in every dtype; all_gather,
// all_to_all: any dtype, as bytes).
bool in_place_supported(int32_t collective, int32_t dtype, int32_t op);

// Launches one call whose every rank's input and output this rank reaches (`buffers`, entries [0, nranks)), in
// place: no scratch, each input byte read once and each output byte written once (codes.def kInPlace;
// collectives/in_place.cu states the protocol). Blocks as the collective's block layout says, block_count elements
// of dtype. Every rank of the context makes the same call, with its peers' buffers of that call (a rank whose peers
// run another call fails as call_check.cuh says, or waits out the timeout). The buffers are the launch's until it
// ends on `stream`. One launch (one epoch) whatever the size; capture-safe. Errors (nothing is enqueued):
// cudaErrorInvalidValue for a collective, dtype or op it does not run, nranks outside [2, kDirectPeers] or a null
// buffer; cudaErrorNotReady when the context has no stream semaphores (its barriers use block b's). Its grid is at
// most ctx.stream_blocks blocks, and at most `max_blocks` where that is > 0: every block of every rank must be
// resident at once, so ranks that share a GPU divide its multiprocessors (the same cap on every rank).
cudaError_t launch_in_place(const CollectiveContext& ctx, int32_t collective, const InPlaceBuffers& buffers,
                            uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                            int32_t max_blocks = 0);

// launch_collective's kInPlace (above): launch_in_place over the buffers the ranks post, this rank's `in` and `out`
// (ranks of one process: cudaErrorNotReady without ctx.direct).
cudaError_t launch_in_place_posted(const CollectiveContext& ctx, int32_t collective, const void* in, void* out,
                                   uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                                   int32_t max_blocks = 0);
// The same where the ranks are of several processes: `views` holds this rank's input and output as each rank q
// addresses them (views.in[q], views.out[q]; runtime/gpu/allocation_exchange.h maps them), and the kernel posts
// each rank its own.
cudaError_t launch_in_place_views(const CollectiveContext& ctx, int32_t collective, const InPlaceBuffers& views,
                                  uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream,
                                  int32_t max_blocks = 0);

// The algorithm the call entry runs for a call that asked for `algorithm`, where the peers may reach the call's
// buffers (runtime/gpu/call.h, CollectiveCall::peers_reach_buffers: the JAX path's XLA buffers): kInPlace where the
// ranks post their buffers to each other (ctx.direct), launch_in_place runs the collective, dtype and op, and
// `algorithm` would stream the call's blocks as HB through scratch (itself or by its protocol rows): there a copy
// through scratch costs most, and the kernel in place moves each input byte once and each output byte once
// (docs/architecture.md, "In place between ranks of one process"), on 2 ranks from 4 MiB a rank (below, HB's one
// hop beats its two meets; in_place.cu has the figures). An all_to_all whose input and output overlap keeps
// `algorithm`. Every other call keeps it: LL packets win at the latency-bound sizes. A function of the call
// and the communicator's shape alone, so every rank decides alike (a rank deciding otherwise fails the call check).
int32_t direct_algorithm(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                         const void* out, uint64_t block_count, int32_t dtype, int32_t op);
// The same rule whatever ctx.direct says: where the ranks of several processes reach each other's buffers through
// mapped allocations (runtime/gpu/call.cc), kInPlace is what they then agree on per call.
int32_t in_place_algorithm(const CollectiveContext& ctx, int32_t collective, int32_t algorithm, const void* in,
                           const void* out, uint64_t block_count, int32_t dtype, int32_t op);

// The rank's failed word (jax_mscclpp/call_inbox.cuh) in a context whose scratch is allocated: FailedOutputs::failed.
const uint64_t* rank_failed_word(const CollectiveContext& ctx);

}  // namespace jax_mscclpp
