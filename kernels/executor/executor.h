// The plan executor: one generic kernel that interprets an execution plan (jax_mscclpp/dsl/PLAN.md) with the
// primitive calls inlined. One CUDA block per plan thread block; the block runs its thread block's operations
// in order, every thread of the block taking part in each data operation.
//
// The host (runtime/gpu/executor_plan.h) turns the integer encoding of a plan (jax_mscclpp/plans.py) into a
// DevicePlan for one rank of one CollectiveContext: per thread block one "program image" (PlanImage below), every
// reference resolved, the channel handles themselves copied in. At its start a block copies its image into shared
// memory in one pass (one round of global loads), then runs its operations from there. A plan channel is bound to
// a channel of the rank's CollectiveContext:
//   memory -> ctx.mem[peer * channels_per_peer + k], port -> ctx.port[peer * channels_per_peer + k], where k
//             numbers the plan channels of that type between the two ranks in one order both ends compute (so
//             both ends use one RankContext channel index, hence one pair of semaphore words);
//   memory from a rank to itself -> a handle owned by the ExecutorPlan (its own semaphore words);
//   switch -> ctx.sw: the emulated SwitchChannel over every rank's scratch (any member subset, reduced in
//             member order); a hardware (multicast) ctx.sw serves channels of every rank only.
//
// Groups: the host marks runs of operations that the kernel executes as one step (PlanOp::group on the first):
//   signals on memory channels: one block barrier, then thread k signals the k-th channel, so the system-scope
//     fences run in parallel instead of one after another;
//   waits on distinct channels: thread k waits on the k-th, then one block barrier;
//   put_packets of one chunk count: one step; when they share the source, each thread reads a source word once
//     and writes it to every destination;
//   read_packets of one chunk count: one step;
//   copies and puts on memory channels: one step whose chunks are copied together (copy_jobs: small chunks get
//     warps of their own, so every chunk's loads are in flight at once where one operation after another would
//     wait for each in turn). Operations between two barrier points touch no common chunk (lowering places a
//     barrier before any conflict), so they may run in any order.
// Before grouping, the host splits a memory put_with_signal into its put and its signal, and defers each signal
// on a memory channel past the memory puts and signals that follow it in its thread block (never past any other
// operation). A deferred signal releases at least what it released before and crosses no wait, so what the
// verifier proved of the plan (every read covered by a wait, no deadlock) still holds.
//
// Scratch layout: that of the collective kernels (kernels/collectives/collective_common.cuh), so plans and
// hand-written algorithms can alternate on one communicator: [LL half 0 | LL half 1 | HB half 0 | HB half 1].
// A plan with packet chunks (scratch.packets) uses the LL halves, any other the HB halves; call e (this call's
// epoch + 1) uses half e & 1. In a half, scratch chunk i starts at i * stride, stride = plan_chunk_stride()
// (16-byte aligned: HB data of ce elements, or the LL packets carrying them). The host renumbers the plan's
// scratch chunks densely over those some operation of some rank names (lowering leaves fused-away temporaries
// unnamed), the same way on every rank. After them come the staging chunks of port puts whose source is the
// caller's input or output (the proxy only copies between registered buffers: the thread block copies the source
// there first). PortChannels of ctx must be built over the whole scratch (local = scratch) and scratch must be
// under 4 GiB (proxy offsets are 32-bit). Every rank's scratch has the same size.
//
// Messages larger than a half allows are pipelined: launch_plan cuts every block into pieces of at most
// plan_piece_elements() elements, one launch (one epoch) per piece; the count depends on the sizes alone.
//
// LL packets: PLAN.md's LL8 layout (4 data bytes + 4 flag bytes per 8-byte word). Chunk bases are 16-byte
// aligned, so the executor moves two words at a time as one LL16 packet (identical bytes) and rounds a chunk's
// packets up to an even count. Every packet carries this call's flag, uint32(epoch + 1).
//
// Epoch: each block reads the epoch from ctx.epoch (device memory, replicated: jax_mscclpp/epoch.cuh) at its start
// and stores the new count at its end. Nothing per call changes on the host: launches replay under CUDA graphs and
// XLA command buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "collectives/collective.h"

namespace jax_mscclpp {

namespace plan_codes {
// The codes of the integer encoding (jax_mscclpp/codes.def); kSelfMemory is the executor's own kind for a memory
// channel to the rank itself.
enum Op : uint8_t {
#define JAX_MSCCLPP_PLAN_OP(enumerator, code, name) enumerator = code,
#include "jax_mscclpp/codes.def"
};
enum Buffer : int16_t {
#define JAX_MSCCLPP_PLAN_BUFFER(enumerator, code, name) enumerator = code,
#include "jax_mscclpp/codes.def"
};
enum ChannelKind : int32_t {
#define JAX_MSCCLPP_PLAN_CHANNEL(enumerator, code, name) enumerator = code,
#include "jax_mscclpp/codes.def"
  kSelfMemory,
};
}  // namespace plan_codes

// The operations the plan kernel runs inline, on the latency path of small messages: LL packets and
// synchronization. A plan of these only runs on the lean kernel, compiled without the out-of-line operations
// (plan_kernel.cuh): less code and no spills (ptxas, sm_90, float32 sum: an 88-byte stack frame where the full
// kernel's is 848 bytes with 200 of spill stores).
JAX_MSCCLPP_HOST_DEVICE_INLINE constexpr bool plan_op_runs_inline(uint8_t code) {
  return code == plan_codes::kPutPackets || code == plan_codes::kReadPackets || code == plan_codes::kReducePackets ||
         code == plan_codes::kSignal || code == plan_codes::kWait || code == plan_codes::kBarrier;
}

// Most references of one kind in one operation (sources, packet sources, remotes) and most switch members.
constexpr int kPlanMaxOperands = 32;

// One chunk reference: chunks index .. index + op.count - 1 of `buffer`; `channel` (thread block local) for
// packet sources and remote destinations, else -1.
struct PlanRef {
  int16_t buffer;
  int16_t channel;
  int32_t index;
};

// One operation. Its references are refs[ref ..]: dst, src, srcs[n_srcs], packet_srcs[n_packet_srcs],
// remotes[n_remotes] (dst/src have buffer kNone where the operation has none).
struct PlanOp {
  uint8_t code;
  uint8_t n_srcs;
  uint8_t n_packet_srcs;
  uint8_t n_remotes;
  int32_t channel;  // thread block local channel, -1 for none
  int32_t count;    // chunks per reference
  int32_t ref;      // first reference, relative to the thread block's first
  int32_t staging;  // port put from input/output: first staging chunk (scratch chunk index); else -1
  int16_t group;          // operations [this, this + group) run as one step ("Groups"); 1 alone, 0 inside one
  uint8_t shared_source;  // a put_packets group whose operations all read one source chunk range
  uint8_t reserved;
};

// Bytes of a channel handle in a program image (a MemoryChannelDeviceHandle or PortChannelDeviceHandle).
constexpr uint32_t kPlanChannelHandleBytes = 96;

// A channel as one thread block sees it, handle included.
struct alignas(16) PlanChannel {
  int32_t kind;          // plan_codes::ChannelKind
  int32_t first_member;  // switch: the image's members[first_member ..], in reduction order
  int32_t n_members;
  int32_t reserved;
  unsigned char handle[kPlanChannelHandleBytes];
};

// The head of one thread block's program image. The image is, 16-byte aligned:
//   PlanImage | PlanChannel[n_channels] | PlanOp[n_ops] | PlanRef[n_refs] | int32 members[n_members]
// at the byte offsets below (from the image's start).
struct alignas(16) PlanImage {
  int32_t n_channels, n_ops, n_refs, n_members;
  uint32_t ops_offset, refs_offset, members_offset, reserved;
};

// One rank's plan, as the kernel reads it. Plain data; `images` is device memory owned by the host object that
// built it (runtime/gpu/executor_plan.h).
struct DevicePlan {
  int32_t rank;
  int32_t nranks;
  int32_t n_threadblocks;  // CUDA blocks per launch (at least 1)
  int32_t threads;         // CUDA threads per block
  int32_t input_blocks;
  int32_t output_blocks;
  int32_t chunks_per_block;
  int32_t scratch_chunks;  // the plan's scratch chunks, renumbered densely over the named ones
  int32_t staging_chunks;  // after them: staging for port puts from input/output
  int32_t packets;         // scratch chunks have the LL packet stride
  uint32_t image_bytes;    // bytes per program image (a multiple of 16): the dynamic shared memory per block
  int32_t port_channels;   // port channels the plan uses (the context must have ctx.port then)
  int32_t switch_channels; // switch channels the plan uses (the context must have a usable ctx.sw then)
  int32_t collective;      // the plan's collective (codes.def)
  uint32_t fingerprint;    // plan_fingerprint of its name: what the call check tells peers (call_check.cuh)
  int32_t inline_only;     // every operation is one the kernel runs inline (plan_op_runs_inline): the lean kernel
  const uint4* images;     // n_threadblocks images, image_bytes apart
};

// Element count of a chunk (ce) for `block_count` elements per block.
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t plan_chunk_elements(uint64_t block_count, int32_t chunks_per_block) {
  return (block_count + chunks_per_block - 1) / chunks_per_block;
}
// Bytes between two scratch chunks: 16-byte multiple of the HB data (ce elements) or of its LL packets.
JAX_MSCCLPP_HOST_DEVICE_INLINE uint64_t plan_chunk_stride(uint64_t ce, uint32_t itemsize, bool packets) {
  const uint64_t bytes = ce * itemsize;
  return packets ? (bytes + 7) / 8 * 16 : (bytes + 15) / 16 * 16;
}
// Element size of a dtype code (jax_mscclpp/reduce.cuh), 0 if unknown.
uint32_t plan_dtype_bytes(int32_t dtype);

// Bytes of one half of the plan's region (LL or HB halves) in a registered scratch of `scratch_bytes`.
uint64_t plan_region_half_bytes(const DevicePlan& plan, uint64_t scratch_bytes);
// Bytes of one half that a launch of `block_count` elements per block needs.
uint64_t plan_half_bytes_needed(const DevicePlan& plan, uint64_t block_count, int32_t dtype);
// Most elements per block one launch takes with a registered scratch of `scratch_bytes` (a multiple of 16 and
// of chunks_per_block; 0 when not even one element per chunk fits).
uint64_t plan_piece_elements(const DevicePlan& plan, uint64_t scratch_bytes, int32_t dtype);
// Launches one call takes (0 for block_count 0, or when nothing fits).
uint64_t plan_launch_count(const DevicePlan& plan, uint64_t scratch_bytes, uint64_t block_count, int32_t dtype);
// The smallest registered scratch with which `block_count` elements per block run in one launch.
uint64_t plan_scratch_bytes_for(const DevicePlan& plan, uint64_t block_count, int32_t dtype);

// Launches one call of `plan` on `stream` (plan_launch_count() launches). `block_count` is the element count
// of one block (PLAN.md: input count / input blocks); `in` holds input_blocks * block_count elements, `out`
// output_blocks * block_count. block_count 0 launches nothing. cudaErrorInvalidValue for an unknown dtype/op or
// a scratch too small for one element per chunk; cudaErrorNotReady when the plan uses port channels and the
// context has none (or its scratch is 4 GiB or more), or a switch channel and the context has no usable one.
cudaError_t launch_plan(const CollectiveContext& ctx, const DevicePlan& plan, const void* in, void* out,
                        uint64_t block_count, int32_t dtype, int32_t op, cudaStream_t stream);

// The most blocks of `plan`'s kernel for `dtype` and `op` the current device holds at once: its multiprocessors
// times the blocks one holds (threads, registers, the image's shared memory). A launch's blocks wait for blocks of
// other ranks and of their own launch, so every block of every rank launched together on one GPU must fit this,
// or the call never ends. 0 for an unknown dtype or op, or a device that cannot be asked.
int plan_resident_blocks(const DevicePlan& plan, int32_t dtype, int32_t op);
// The least plan_resident_blocks over every dtype and reduction: what a rank may launch of `plan` whatever its calls.
int plan_resident_blocks_for_every_call(const DevicePlan& plan);

}  // namespace jax_mscclpp
