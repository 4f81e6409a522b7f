// The plan executor kernel (see executor.h for the plan format, the groups and the scratch layout), as a
// template over (element type, reduction). Included only by the plan_kernels_<dtype>.cu files that
// kernels/CMakeLists.txt generates, one per dtype row of codes.def (JAX_MSCCLPP_PLAN_KERNELS), so that the
// instantiations compile in parallel.
//
// Every thread of a block interprets the same operation stream (from shared memory), so control flow is
// uniform; data operations split their chunks over the block's threads. Barrier points of PLAN.md map to
// __syncthreads():
//   signal            : __syncthreads, then one thread per signal of the group signals (memory: system fence +
//                       add on the peer's word; port: FIFO push by thread 0, which fences first). Nothing after
//                       a signal depends on it, so the other threads go on.
//   wait              : one thread per wait of the group waits (acquire), then __syncthreads: every thread reads
//                       after the acquires.
//   flush             : thread 0 flushes (port), then __syncthreads: no thread reuses a source before.
//   put_with_signal   : (port; memory ones arrive split) the put, __syncthreads, then thread 0 signals. No
//                       barrier before the put: lowering places one where an earlier operation wrote its
//                       source (PLAN.md, "Execution model": the barrier point follows the put).
//   barrier           : __syncthreads.
// Port puts are pushed by thread 0, always in program order, so a signal follows the puts of its channel in
// the proxy FIFO. LL packet operations need no barrier: each packet carries the call's flag.
#pragma once

#include "collectives/collective_common.cuh"
#include "executor/executor.h"
#include "executor/plan_kernel.h"
#include "jax_mscclpp/copy.cuh"
#include "jax_mscclpp/packet.cuh"
#include "jax_mscclpp/reduce.cuh"

namespace jax_mscclpp {
namespace {

namespace pc = plan_codes;

static_assert(sizeof(MemoryChannelDeviceHandle) <= kPlanChannelHandleBytes, "memory channel handle too large");
static_assert(sizeof(PortChannelDeviceHandle) <= kPlanChannelHandleBytes, "port channel handle too large");
static_assert(sizeof(PlanChannel) % 16 == 0 && sizeof(PlanImage) % 16 == 0, "image sections stay 16-byte aligned");

// multimem_supported() is a host constexpr function: evaluated here, at namespace scope.
template <class T, class Op>
constexpr bool kMultimem = multimem_supported<T, Op>();

// This launch's geometry (PLAN.md, "Buffer geometry", for one piece of every block; executor.h, scratch layout).
struct Geometry {
  const char* in;   // the piece's first element of input block 0
  char* out;        // and of output block 0
  char* scratch;    // this launch's half of this rank's scratch
  uint64_t half;    // byte offset of that half in every rank's scratch
  uint64_t block_count;   // elements of the piece in each block
  uint64_t block_stride;  // elements between two blocks of input or output
  uint64_t ce;
  uint64_t stride;
  uint32_t es;
  uint32_t cpb;

  // Address of chunk i of a local buffer, and its valid length in elements.
  __device__ __forceinline__ char* local(int buffer, uint32_t i, uint64_t& len) const {
    if (buffer == pc::kScratch) {
      len = ce;
      return scratch + i * stride;
    }
    const uint32_t b = i / cpb, j = i % cpb;
    uint64_t start = j * ce;
    if (start > block_count) start = block_count;
    const uint64_t stop = start + ce < block_count ? start + ce : block_count;
    len = stop - start;
    return (buffer == pc::kInput ? const_cast<char*>(in) : out) + (b * block_stride + start) * es;
  }
  // Byte offset of scratch chunk i in any rank's scratch (peers use the same half: same epoch).
  __device__ __forceinline__ uint64_t scratch_offset(uint32_t i) const { return half + i * stride; }
};

__device__ __forceinline__ uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

// 8 bytes (n <= 8 valid, the rest zero) from any alignment.
__device__ __forceinline__ uint2 load8(const char* p, uint32_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (n == 8) {
    if ((a & 7) == 0) return *reinterpret_cast<const uint2*>(p);
    if ((a & 3) == 0) {
      const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
      return make_uint2(q[0], q[1]);
    }
    if ((a & 1) == 0) {
      const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
      return make_uint2(q[0] | (static_cast<uint32_t>(q[1]) << 16), q[2] | (static_cast<uint32_t>(q[3]) << 16));
    }
  }
  uint64_t x = 0;
  for (uint32_t i = 0; i < n; ++i) x |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return make_uint2(static_cast<uint32_t>(x), static_cast<uint32_t>(x >> 32));
}

// Stores the first n (<= 8) bytes of v at any alignment.
__device__ __forceinline__ void store8(char* p, uint32_t n, uint2 v) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (n == 8) {
    if ((a & 7) == 0) {
      *reinterpret_cast<uint2*>(p) = v;
      return;
    }
    if ((a & 3) == 0) {
      uint32_t* q = reinterpret_cast<uint32_t*>(p);
      q[0] = v.x;
      q[1] = v.y;
      return;
    }
    if ((a & 1) == 0) {
      uint16_t* q = reinterpret_cast<uint16_t*>(p);
      q[0] = static_cast<uint16_t>(v.x);
      q[1] = static_cast<uint16_t>(v.x >> 16);
      q[2] = static_cast<uint16_t>(v.y);
      q[3] = static_cast<uint16_t>(v.y >> 16);
      return;
    }
  }
  const uint64_t x = v.x | (static_cast<uint64_t>(v.y) << 32);
  for (uint32_t i = 0; i < n; ++i) p[i] = static_cast<char>(x >> (8 * i));
}

// dsts[d][i] = srcs[0][i] (op) ... (op) srcs[nsrc-1][i], i < n, for every d: the result is stored from
// registers into each destination (reduce_put). 16-byte vectors when every pointer allows. Each thread folds
// kUnroll vectors at a time: the first two sources' loads issued together (2 x kUnroll loads in flight for the
// common two-source reduce), then each further source's kUnroll loads; what is left (a small chunk: all of it)
// one vector at a time, the source loop unrolled so that several sources' loads are in flight. The sources are
// folded in their order, so the result has the same bits as a one-vector-at-a-time fold.
template <class T, class Op>
__device__ __noinline__ void reduce_store(T* const* dsts, int ndst, const T* const* srcs, int nsrc, uint64_t n,
                                             uint32_t tid, uint32_t nt) {
  constexpr int kUnroll = 4;
  constexpr uint64_t L = 16 / sizeof(T);
  uintptr_t mis = 0;
  for (int d = 0; d < ndst; ++d) mis |= reinterpret_cast<uintptr_t>(dsts[d]);
  for (int s = 0; s < nsrc; ++s) mis |= reinterpret_cast<uintptr_t>(srcs[s]);
  uint64_t done = 0;
  if ((mis & 15) == 0) {
    const uint64_t nvec = n / L;
    const uint4* s0 = reinterpret_cast<const uint4*>(srcs[0]);
    const uint4* s1 = reinterpret_cast<const uint4*>(srcs[nsrc > 1 ? 1 : 0]);
    uint64_t i = tid;
    for (; i + (kUnroll - 1) * static_cast<uint64_t>(nt) < nvec; i += kUnroll * static_cast<uint64_t>(nt)) {
      VecAccumulator<T, Op> acc[kUnroll];
      uint4 a[kUnroll], b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        a[u] = s0[i + u * nt];
        if (nsrc > 1) b[u] = s1[i + u * nt];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        acc[u].init(a[u]);
        if (nsrc > 1) acc[u].add(b[u]);
      }
      for (int s = 2; s < nsrc; ++s) {
        const uint4* sp = reinterpret_cast<const uint4*>(srcs[s]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) a[u] = sp[i + u * nt];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc[u].add(a[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) a[u] = acc[u].result();
      for (int d = 0; d < ndst; ++d) {
        uint4* dp = reinterpret_cast<uint4*>(dsts[d]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) dp[i + u * nt] = a[u];
      }
    }
    // The rest, one vector a thread at a time (unrolled, so several sources' loads are in flight together).
    for (; i < nvec; i += nt) {
      VecAccumulator<T, Op> acc;
      acc.init(s0[i]);
#pragma unroll 4
      for (int s = 1; s < nsrc; ++s) acc.add(reinterpret_cast<const uint4*>(srcs[s])[i]);
      const uint4 r = acc.result();
      for (int d = 0; d < ndst; ++d) reinterpret_cast<uint4*>(dsts[d])[i] = r;
    }
    done = nvec * L;
  }
  for (uint64_t i = done + tid; i < n; i += nt) {
    T r = srcs[0][i];
    for (int s = 1; s < nsrc; ++s) r = reduce_scalar<T, Op>(r, srcs[s][i]);
    for (int d = 0; d < ndst; ++d) dsts[d][i] = r;
  }
}

// The first kRegisterOperands operands of an operation (destinations of put_packets, packet sources and remote
// destinations of reduce_packets) are kept in registers (constant indices after unrolling); further ones are
// recomputed from the image as they are needed. One: every unrolled operand copies the packet loop's body, and on
// the latency path of small messages the kernel's time goes to fetching its code (8 unrolled operands made a
// 2-rank 4 KiB all-reduce's put and reduce steps 0.3 and 0.5 us slower; kernels/README.md).
constexpr int kRegisterOperands = 1;
constexpr int kRegisterSources = 2;  // plain (non-packet) sources of reduce_packets: usually the rank's own input

// One thread block's view of its plan during a call.
struct Block {
  Geometry g;
  const PlanChannel* ch;   // the image's channels (shared memory)
  const int32_t* members;  // the image's switch members (shared memory)
  uint32_t flag;
  uint32_t tid;
  uint32_t nt;

  __device__ __forceinline__ const MemoryChannelDeviceHandle& mem(int c) const {
    return *reinterpret_cast<const MemoryChannelDeviceHandle*>(ch[c].handle);
  }
  __device__ __forceinline__ const PortChannelDeviceHandle& port(int c) const {
    return *reinterpret_cast<const PortChannelDeviceHandle*>(ch[c].handle);
  }
  __device__ __forceinline__ bool is_port(int c) const { return ch[c].kind == pc::kPort; }
  // A peer's scratch chunk i reached through memory channel c (the rank's own for a self channel).
  __device__ __forceinline__ char* remote(int c, uint32_t i) const { return mem(c).remote + g.scratch_offset(i); }
  __device__ __forceinline__ const LL16Packet* packets(uint32_t i) const {
    return reinterpret_cast<const LL16Packet*>(g.scratch + i * g.stride);
  }

  // ---- synchronization (groups: executor.h) ----
  // Signals ops[0 .. group) (memory channels, or one port channel): after a block barrier, thread k signals the
  // k-th (memory: system fence + add on the peer's word; port: FIFO push, which fences first).
  __device__ __forceinline__ void signal(const PlanOp* ops, int group) const {
    __syncthreads();
    for (int k = static_cast<int>(tid); k < group; k += static_cast<int>(nt)) {
      const int c = ops[k].channel;
      if (is_port(c)) {
        port(c).signal();
      } else {
        mem(c).signal();
      }
    }
  }
  // Waits on ops[0 .. group) (distinct channels): thread k waits (acquire) on the k-th, then a block barrier makes
  // what every wait acquired visible to the whole block.
  __device__ __forceinline__ void wait(const PlanOp* ops, int group) const {
    for (int k = static_cast<int>(tid); k < group; k += static_cast<int>(nt)) {
      const int c = ops[k].channel;
      if (is_port(c)) {
        port(c).wait();
      } else {
        mem(c).wait();
      }
    }
    __syncthreads();
  }
  __device__ __forceinline__ void flush(int c) const {
    if (tid == 0 && is_port(c)) port(c).flush();
    __syncthreads();
  }

  // ---- data movement ----
  // Chunk t of a copy, or of a put on a memory channel (into the peer's scratch), as a copy job: no bytes for a
  // copy onto itself or past the buffer's end.
  __device__ __forceinline__ CopyJob chunk_copy(const PlanOp& op, const PlanRef* r, int t) const {
    uint64_t ls;
    const char* s = g.local(r[1].buffer, r[1].index + t, ls);
    if (op.code != pc::kCopy) return CopyJob{remote(op.channel, r[0].index + t), s, min64(ls, g.ce) * g.es};
    uint64_t ld;
    char* d = g.local(r[0].buffer, r[0].index + t, ld);
    return CopyJob{d, s, d == s ? 0 : min64(ld, ls) * g.es};
  }

  // One copy or memory put: its chunks one after another, with every thread.
  __device__ __forceinline__ void copy(const PlanOp& op, const PlanRef* r) const {
    for (int t = 0; t < op.count; ++t) {
      const CopyJob c = chunk_copy(op, r, t);
      if (c.bytes != 0) copy_bytes(c.dst, c.src, c.bytes, tid, nt);
    }
  }

  // ops[0 .. group): copies and puts on memory channels, every chunk of them one copy job (copy_jobs: where the
  // chunks are small each gets warps of its own, so their loads are in flight together).
  __device__ __forceinline__ void copies(const PlanOp* ops, int group, const PlanRef* refs) const {
    int jobs = 0;
    for (int k = 0; k < group; ++k) jobs += ops[k].count;
    const auto job = [&](int j) {
      int k = 0;
      while (j >= ops[k].count) j -= ops[k++].count;
      return chunk_copy(ops[k], refs + ops[k].ref, j);
    };
    copy_jobs(jobs, g.ce * g.es, job, tid, nt);
  }

  // put / put_with_signal. Memory: thread stores into the peer's scratch (a put_with_signal on a memory channel
  // reaches the kernel split into put and signal). Port: DMA requests pushed by thread 0; a source outside
  // scratch is first copied to this operation's staging chunks.
  __device__ __forceinline__ void put(const PlanOp& op, const PlanRef* r, bool with_signal) const {
    const int c = op.channel;
    if (!is_port(c)) {
      copy(op, r);
      return;
    }
    const bool staged = r[1].buffer != pc::kScratch;
    // The staging copy reads the source split over the threads with no barrier first: ordering it after the
    // block's earlier writes of the source is the plan's (a barrier placed by lowering).
    if (staged) {
      for (int t = 0; t < op.count; ++t) {
        uint64_t ls;
        const char* s = g.local(r[1].buffer, r[1].index + t, ls);
        const uint64_t n = min64(ls, g.ce);
        if (n != 0) copy_bytes(g.scratch + (op.staging + t) * g.stride, s, n * g.es, tid, nt);
      }
    }
    if (staged || with_signal) __syncthreads();  // the staged data (and, for a signal, every write) first
    if (tid == 0) {
      const PortChannelDeviceHandle& h = port(c);
      for (int t = 0; t < op.count; ++t) {
        uint64_t ls;
        g.local(r[1].buffer, r[1].index + t, ls);
        const uint64_t n = min64(ls, g.ce);
        const uint32_t src = staged ? op.staging + t : r[1].index + t;
        if (n != 0) h.put(g.scratch_offset(r[0].index + t), g.scratch_offset(src), n * g.es);
      }
      if (with_signal) h.signal();
    }
  }

  // ops[0 .. group): put_packets to peers' scratch; every packet of a destination chunk is written (past the valid
  // bytes they are padding), with this call's flag. When they share one source (shared_source), each thread reads
  // a source word once and writes it to every destination.
  __device__ __forceinline__ void put_packets(const PlanOp* ops, int group, const PlanRef* refs) const {
    const uint64_t npk = (g.ce * g.es + 7) / 8;
    if (!ops[0].shared_source) {
      for (int k = 0; k < group; ++k) {
        const PlanRef* r = refs + ops[k].ref;
        for (int t = 0; t < ops[k].count; ++t) {
          uint64_t ls;
          const char* s = g.local(r[1].buffer, r[1].index + t, ls);
          put_packet_words(s, min64(ls, g.ce) * g.es, npk, reinterpret_cast<LL16Packet*>(remote(ops[k].channel, r[0].index + t)));
        }
      }
      return;
    }
    const PlanRef* r = refs + ops[0].ref;
    for (int t = 0; t < ops[0].count; ++t) {
      uint64_t ls;
      const char* s = g.local(r[1].buffer, r[1].index + t, ls);
      const uint64_t nb = min64(ls, g.ce) * g.es;
      LL16Packet* d[kRegisterOperands];
#pragma unroll
      for (int k = 0; k < kRegisterOperands; ++k)
        d[k] = k < group ? reinterpret_cast<LL16Packet*>(remote(ops[k].channel, refs[ops[k].ref].index + t)) : nullptr;
      const bool aligned = (reinterpret_cast<uintptr_t>(s) & 7) == 0;
      for (uint64_t u = tid; u < npk; u += nt) {
        const uint2 v = source_word(s, nb, u, aligned);
#pragma unroll
        for (int k = 0; k < kRegisterOperands; ++k) {
          if (k < group) d[k][u].write(v, flag);
        }
        for (int k = kRegisterOperands; k < group; ++k)
          reinterpret_cast<LL16Packet*>(remote(ops[k].channel, refs[ops[k].ref].index + t))[u].write(v, flag);
      }
    }
  }
  // Source word u (8 bytes, zero past the nb valid ones) of a chunk at s.
  __device__ __forceinline__ static uint2 source_word(const char* s, uint64_t nb, uint64_t u, bool aligned) {
    const uint64_t at = 8 * u;
    if (aligned && at + 8 <= nb) return *reinterpret_cast<const uint2*>(s + at);
    if (at < nb) return load8(s + at, static_cast<uint32_t>(min64(8, nb - at)));
    return make_uint2(0, 0);
  }
  // npk packets at d <- the nb bytes at s.
  __device__ __forceinline__ void put_packet_words(const char* s, uint64_t nb, uint64_t npk, LL16Packet* d) const {
    const bool aligned = (reinterpret_cast<uintptr_t>(s) & 7) == 0;
    for (uint64_t u = tid; u < npk; u += nt) d[u].write(source_word(s, nb, u, aligned), flag);
  }

  // ops[0 .. group): read_packets, one after another without a dispatch between them.
  __device__ __forceinline__ void read_packets(const PlanOp* ops, int group, const PlanRef* refs) const {
    for (int k = 0; k < group; ++k) read_packets(ops[k], refs + ops[k].ref);
  }

  __device__ __forceinline__ void read_packets(const PlanOp& op, const PlanRef* r) const {
    const WaitSite& site = mem(op.channel).semaphore.site;
    for (int t = 0; t < op.count; ++t) {
      uint64_t ld;
      char* d = g.local(r[0].buffer, r[0].index + t, ld);
      const uint64_t nb = min64(ld, g.ce) * g.es;
      const LL16Packet* s = packets(r[1].index + t);
      for (uint64_t u = tid; 8 * u < nb; u += nt) {
        const uint64_t at = 8 * u;
        store8(d + at, static_cast<uint32_t>(min64(8, nb - at)), s[u].read(flag, site));
      }
    }
  }

  // reduce, and reduce_put: the result goes to the local dst and, from the same registers, to every remote dst
  // (memory HB channels).
  template <class T, class Op>
  __device__ __noinline__ void reduce_put(const PlanOp& op, const PlanRef* r) const {
    const PlanRef* srcs = r + 2;
    const PlanRef* remotes = srcs + op.n_srcs + op.n_packet_srcs;
    const T* sp[kPlanMaxOperands];
    T* dp[kPlanMaxOperands + 1];
    for (int t = 0; t < op.count; ++t) {
      uint64_t n;
      dp[0] = reinterpret_cast<T*>(g.local(r[0].buffer, r[0].index + t, n));
      for (int k = 0; k < op.n_srcs; ++k) {
        uint64_t l;
        sp[k] = reinterpret_cast<const T*>(g.local(srcs[k].buffer, srcs[k].index + t, l));
        n = min64(n, l);
      }
      if (op.n_remotes != 0) n = min64(n, g.ce);
      for (int k = 0; k < op.n_remotes; ++k)
        dp[1 + k] = reinterpret_cast<T*>(remote(remotes[k].channel, remotes[k].index + t));
      if (n != 0) reduce_store<T, Op>(dp, 1 + op.n_remotes, sp, op.n_srcs, n, tid, nt);
    }
  }

  // The payload of packet p, a packet source of `src`'s channel: one look first; only a packet not there yet
  // looks up the channel's wait site (which names the peer in a timeout record) and spins.
  __device__ __forceinline__ uint2 packet_of(const LL16Packet* p, const PlanRef& src) const {
    uint2 v;
    if (p->poll(flag, v)) return v;
    return p->read(flag, mem(src.channel).semaphore.site);
  }

  // dst <- plain sources (+) unpacked packet sources, in that order, 8 bytes (one LL16 packet) per step;
  // the result also goes, as packets with this call's flag, to every remote dst (padding included).
  template <class T, class Op>
  __device__ __forceinline__ void reduce_packets(const PlanOp& op, const PlanRef* r) const {
    if (op.n_remotes == 0) {
      reduce_packets_to<T, Op, false>(op, r);
    } else {
      reduce_packets_to<T, Op, true>(op, r);
    }
  }

  // reduce_packets, with (kRemotes) or without remote destinations. The first kRegisterOperands packet sources
  // and remote destinations, and the first kRegisterSources plain sources, stay in registers.
  template <class T, class Op, bool kRemotes>
  __device__ __forceinline__ void reduce_packets_to(const PlanOp& op, const PlanRef* r) const {
    constexpr int R = kRegisterOperands, RS = kRegisterSources;
    const PlanRef* srcs = r + 2;
    const PlanRef* psrcs = srcs + op.n_srcs;
    const PlanRef* remotes = psrcs + op.n_packet_srcs;
    const int ns = op.n_srcs, np = op.n_packet_srcs, nr = kRemotes ? op.n_remotes : 0;
    for (int t = 0; t < op.count; ++t) {
      uint64_t n;
      char* d = g.local(r[0].buffer, r[0].index + t, n);
      const char* sp[RS];
      const LL16Packet* pp[R];
      LL16Packet* rp[kRemotes ? R : 1];
      uintptr_t mis = reinterpret_cast<uintptr_t>(d);
      for (int k = 0; k < ns; ++k) {
        uint64_t l;
        const char* s = g.local(srcs[k].buffer, srcs[k].index + t, l);
        n = min64(n, l);
        mis |= reinterpret_cast<uintptr_t>(s);
      }
#pragma unroll
      for (int k = 0; k < RS; ++k) {
        uint64_t l;
        sp[k] = k < ns ? g.local(srcs[k].buffer, srcs[k].index + t, l) : nullptr;
      }
#pragma unroll
      for (int k = 0; k < R; ++k) pp[k] = k < np ? packets(psrcs[k].index + t) : nullptr;
      if constexpr (kRemotes) {
#pragma unroll
        for (int k = 0; k < R; ++k)
          rp[k] = k < nr ? reinterpret_cast<LL16Packet*>(remote(remotes[k].channel, remotes[k].index + t)) : nullptr;
      }
      if (np + nr != 0) n = min64(n, g.ce);
      const uint64_t nb = n * g.es;
      const uint64_t units = (nb + 7) / 8;
      const uint64_t end = kRemotes ? (g.ce * g.es + 7) / 8 : units;
      const bool aligned = (mis & 7) == 0;
      for (uint64_t u = tid; u < end; u += nt) {
        uint2 res = make_uint2(0, 0);
        if (u < units) {
          const uint64_t at = 8 * u;
          const uint32_t valid = static_cast<uint32_t>(min64(8, nb - at));
          const bool whole = aligned && valid == 8;
          VecAccumulator<T, Op> acc;
          bool first = true;
          auto fold = [&](uint2 v) {
            const uint4 w = make_uint4(v.x, v.y, 0, 0);  // the upper 8 bytes ride along unused
            if (first) {
              acc.init(w);
              first = false;
            } else {
              acc.add(w);
            }
          };
#pragma unroll
          for (int k = 0; k < RS; ++k) {
            if (k < ns) fold(whole ? *reinterpret_cast<const uint2*>(sp[k] + at) : load8(sp[k] + at, valid));
          }
          for (int k = RS; k < ns; ++k) {
            uint64_t l;
            fold(load8(g.local(srcs[k].buffer, srcs[k].index + t, l) + at, valid));
          }
#pragma unroll
          for (int k = 0; k < R; ++k) {
            if (k < np) fold(packet_of(pp[k] + u, psrcs[k]));
          }
          for (int k = R; k < np; ++k) fold(packet_of(packets(psrcs[k].index + t) + u, psrcs[k]));
          const uint4 sum = acc.result();
          res = make_uint2(sum.x, sum.y);
          if (whole) {
            *reinterpret_cast<uint2*>(d + at) = res;
          } else {
            store8(d + at, valid, res);
          }
        }
        if constexpr (kRemotes) {
#pragma unroll
          for (int k = 0; k < R; ++k) {
            if (k < nr) rp[k][u].write(res, flag);
          }
          for (int k = R; k < nr; ++k)
            reinterpret_cast<LL16Packet*>(remote(remotes[k].channel, remotes[k].index + t))[u].write(res, flag);
        }
      }
    }
  }

  // dst <- reduction over the members, in member order, of their scratch chunk src.
  template <class T, class Op>
  __device__ __noinline__ void switch_reduce(const PlanOp& op, const PlanRef* r,
                                                const SwitchChannelDeviceHandle& sw) const {
    const PlanChannel& c = ch[op.channel];
    const T* sp[kPlanMaxOperands];
    for (int t = 0; t < op.count; ++t) {
      uint64_t n;
      T* d = reinterpret_cast<T*>(g.local(r[0].buffer, r[0].index + t, n));
      n = min64(n, g.ce);
      if (n == 0) continue;
      const uint64_t off = g.scratch_offset(r[1].index + t);
      if (sw.multicast != nullptr && c.n_members == sw.nranks) {
        if constexpr (kMultimem<T, Op>) {
          sw.reduce<T, Op>(d, off, n, tid, nt);
        } else {
          __trap();  // no multimem form for this dtype/op: the host builds an emulated channel instead
        }
        continue;
      }
      if (sw.members == nullptr) __trap();
      for (int m = 0; m < c.n_members; ++m)
        sp[m] = reinterpret_cast<const T*>(sw.members[members[c.first_member + m]] + off);
      reduce_store<T, Op>(&d, 1, sp, c.n_members, n, tid, nt);
    }
  }

  // Scratch chunk dst of every member <- local src.
  __device__ __forceinline__ void switch_broadcast(const PlanOp& op, const PlanRef* r,
                                                   const SwitchChannelDeviceHandle& sw) const {
    const PlanChannel& c = ch[op.channel];
    for (int t = 0; t < op.count; ++t) {
      uint64_t n;
      const char* s = g.local(r[1].buffer, r[1].index + t, n);
      n = min64(n, g.ce);
      if (n == 0) continue;
      const uint64_t off = g.scratch_offset(r[0].index + t);
      if (sw.multicast != nullptr && c.n_members == sw.nranks) {
        sw.broadcast<unsigned char>(off, reinterpret_cast<const unsigned char*>(s), n * g.es, tid, nt);
        continue;
      }
      if (sw.members == nullptr) __trap();
      for (int m = 0; m < c.n_members; ++m)
        copy_bytes(sw.members[members[c.first_member + m]] + off, s, n * g.es, tid, nt);
    }
  }
};

// The rarer operations that do not depend on the element type: compiled once, called by every instantiation of
// the kernel (keeps its 36 dtype/op instantiations small). The packet and synchronization steps, on the latency
// path of small messages, are inlined in the kernel instead.
__device__ __noinline__ void run_untyped(const Block& b, const PlanOp* ops, int group, const PlanRef* refs,
                                         const SwitchChannelDeviceHandle& sw) {
  const PlanOp& op = ops[0];
  const PlanRef* r = refs + op.ref;
  if (group > 1) {  // copies and memory puts: the only out-of-line operations the host groups
    b.copies(ops, group, refs);
    return;
  }
  switch (op.code) {
    case pc::kCopy: b.copy(op, r); break;
    case pc::kPut: b.put(op, r, false); break;
    case pc::kPutWithSignal: b.put(op, r, true); break;
    case pc::kFlush: b.flush(op.channel); break;
    case pc::kSwitchBroadcast: b.switch_broadcast(op, r, sw); break;
    default: __trap();  // the host validated every code
  }
}

// One launch: one piece of `block_count` elements of every block (blocks `block_stride` elements apart).
// half0 / half1: byte offsets of the plan's two scratch halves; epoch parity picks one. kInlineOnly: the lean
// kernel of a plan whose operations all run inline (DevicePlan::inline_only), which leaves out the rest.
template <class T, class Op, bool kInlineOnly>
__global__ void __launch_bounds__(kPlanMaxThreads)
    plan_kernel(const __grid_constant__ CollectiveContext ctx, const __grid_constant__ DevicePlan plan,
                const char* in, char* out, uint64_t block_count,
                uint64_t block_stride, uint64_t half0, uint64_t half1) {
  extern __shared__ uint4 smem[];
  const uint32_t tid = threadIdx.x, nt = blockDim.x;

  // This block's program image into shared memory: one round of global loads, beside the epoch's.
  const uint32_t words = plan.image_bytes / 16;
  const uint4* image = plan.images + static_cast<uint64_t>(blockIdx.x) * words;
  for (uint32_t i = tid; i < words; i += nt) smem[i] = image[i];
  const uint64_t e = collectives::begin_launch(ctx);
  __syncthreads();
  const PlanImage& head = *reinterpret_cast<const PlanImage*>(smem);
  const char* base = reinterpret_cast<const char*>(smem);
  const PlanOp* s_ops = reinterpret_cast<const PlanOp*>(base + head.ops_offset);
  const PlanRef* s_refs = reinterpret_cast<const PlanRef*>(base + head.refs_offset);

  Block b;
  b.g.in = in;
  b.g.out = out;
  b.g.half = (e & 1) ? half1 : half0;
  b.g.scratch = ctx.scratch + b.g.half;
  b.g.block_count = block_count;
  b.g.block_stride = block_stride;
  b.g.cpb = static_cast<uint32_t>(plan.chunks_per_block);
  b.g.ce = plan_chunk_elements(block_count, plan.chunks_per_block);
  b.g.es = sizeof(T);
  b.g.stride = plan_chunk_stride(b.g.ce, sizeof(T), plan.packets != 0);
  b.ch = reinterpret_cast<const PlanChannel*>(base + sizeof(PlanImage));
  b.members = reinterpret_cast<const int32_t*>(base + head.members_offset);
  b.flag = static_cast<uint32_t>(e);
  b.tid = tid;
  b.nt = nt;

  for (int i = 0; i < head.n_ops;) {
    const PlanOp& op = s_ops[i];
    const int group = op.group;
    switch (op.code) {
      case pc::kPutPackets: b.put_packets(s_ops + i, group, s_refs); break;
      case pc::kReadPackets: b.read_packets(s_ops + i, group, s_refs); break;
      case pc::kSignal: b.signal(s_ops + i, group); break;
      case pc::kWait: b.wait(s_ops + i, group); break;
      case pc::kReducePackets: b.reduce_packets<T, Op>(op, s_refs + op.ref); break;
      case pc::kBarrier: __syncthreads(); break;
      default: {
        if constexpr (kInlineOnly) {
          __trap();  // the host runs a plan on this kernel only where every operation is inline
        } else {
          // The out-of-line operations get a copy of the block's view: `b` itself never has its address taken,
          // so it stays in registers (a volatile packet access would otherwise reload it from local memory).
          const Block view = b;
          if (op.code == pc::kReduce || op.code == pc::kReducePut) {
            view.reduce_put<T, Op>(op, s_refs + op.ref);
          } else if (op.code == pc::kSwitchReduce) {
            view.switch_reduce<T, Op>(op, s_refs + op.ref, ctx.sw);
          } else {
            run_untyped(view, s_ops + i, group, s_refs, ctx.sw);
          }
        }
        break;
      }
    }
    i += group;
  }

  collectives::finish_launch(ctx, e);
}

}  // namespace

template <class T, class Op>
cudaError_t launch_plan_piece(const CollectiveContext& ctx, const DevicePlan& plan, const PlanPiece& piece,
                              cudaStream_t stream) {
  const auto kernel = plan.inline_only ? plan_kernel<T, Op, true> : plan_kernel<T, Op, false>;
  kernel<<<plan.n_threadblocks, plan.threads, plan.image_bytes, stream>>>(
      ctx, plan, piece.in, piece.out, piece.block_count, piece.block_stride, piece.half0, piece.half1);
  return cudaGetLastError();
}

template <class T, class Op>
cudaError_t plan_blocks_per_multiprocessor(const DevicePlan& plan, int* blocks) {
  const auto kernel = plan.inline_only ? plan_kernel<T, Op, true> : plan_kernel<T, Op, false>;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, plan.threads, plan.image_bytes);
}

}  // namespace jax_mscclpp

// The plan kernels of element type T, one per reduction (at global scope).
#define JAX_MSCCLPP_PLAN_KERNEL(T, OP)                                                                    \
  template cudaError_t jax_mscclpp::launch_plan_piece<T, jax_mscclpp::OP>(                                 \
      const jax_mscclpp::CollectiveContext&, const jax_mscclpp::DevicePlan&, const jax_mscclpp::PlanPiece&, \
      cudaStream_t);                                                                                        \
  template cudaError_t jax_mscclpp::plan_blocks_per_multiprocessor<T, jax_mscclpp::OP>(                    \
      const jax_mscclpp::DevicePlan&, int*);
#define JAX_MSCCLPP_PLAN_KERNELS(T) \
  JAX_MSCCLPP_PLAN_KERNEL(T, SumOp) JAX_MSCCLPP_PLAN_KERNEL(T, MaxOp) JAX_MSCCLPP_PLAN_KERNEL(T, MinOp)
