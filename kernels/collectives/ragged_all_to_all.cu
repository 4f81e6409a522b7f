// launch_ragged_all_to_all (collective.h): one rank's part of a ragged all-to-all in one launch, over the
// point-to-point engine's rings and counter words (collectives/p2p_layout.h), every size and offset read on the
// device. docs/architecture.md, "Ragged all-to-all", states the protocol; in short:
//
// Streams. Every other rank p has kP2PLanes send streams (this rank's rows for p) and kP2PLanes receive streams
// (p's rows for this rank), the engine's (peer, direction, lane) streams, whose chunk counters (sent, received)
// they advance exactly as launch_p2p_group does, so the two kinds of launch interleave on one communicator. A
// message of B bytes (the sender's send_sizes[p] rows, the receiver's recv_sizes[p] rows: the same number, as
// lax requires) is cut into lanes as p2p_lane_part cuts it, except that lane 0 always exists: each lane's first
// chunk starts with a 16-byte header {the sender's output_offsets[p], its send_sizes[p]} and holds C - 16 bytes
// of data, the next chunks C bytes each. So a pair with no rows still exchanges one header chunk, the receiver
// learns where its peer's rows go before it writes them (only the sender's table says), and it checks the row
// count against its own recv_sizes. Chunk k of a lane uses slot k mod S of the receiver's ring, with the engine's
// credits (p2p_group.cu states the memory ordering; it is the same here). The rank's own rows are kP2PLanes
// local copy streams that never wait.
//
// Progress is p2p_group.cu's: block b owns streams b, b + grid, ..., thread 0 sweeps them round-robin and the
// block moves one chunk of the first ready one; a sweep that finds none ready ticks a SpinBound naming the first
// waiting stream's peer (kP2PData / kP2PCredit). Every stream of a launch progresses with every other, so no rank
// waits for a chunk its peer's launch has not been able to send.
//
// Bad input seen only here (docs/architecture.md, "Ragged all-to-all"): rows outside the operand (the sender's
// input_offsets and send_sizes) or the output (the header against the receiver's output), or a negative size or
// offset, move nothing out of bounds and keep the protocol; the launch then fails the communicator at its end
// (every rank's failed word, then the rank's record kRaggedBounds naming the peer). A row count that differs from
// recv_sizes cannot keep the protocol (the two ends cut different lanes): the receiver fails the communicator at
// once (kRaggedSizes), so that every rank's waits give up instead of timing out.
#include <cstdint>

#include "collectives/collective.h"
#include "collectives/collective_common.cuh"
#include "jax_mscclpp/atomics.cuh"
#include "jax_mscclpp/copy.cuh"
#include "jax_mscclpp/error_record.cuh"

namespace jax_mscclpp {
namespace {

constexpr int kRaggedThreads = 512;
constexpr uint64_t kHeaderBytes = 16;
constexpr int64_t kNoRows = INT64_MIN;
constexpr int kRaggedMaxStreamsPerBlock = 512;  // shared memory: 64 bytes a stream

// What travels in front of every lane's first chunk.
struct RaggedHeader {
  int64_t first_row;  // the sender's output_offsets[receiver]; kNoRows: the sender's rows were out of its bounds
  int64_t rows;       // the sender's send_sizes[receiver]
};

enum StreamKind : uint8_t { kSend = 0, kReceive = 1, kLocal = 2 };

struct RaggedParams {
  CollectiveContext ctx;
  RaggedAllToAll call;
  int32_t streams;
};

// One stream's progress (shared memory; written by thread 0 only, between block barriers).
struct RaggedStream {
  uint64_t counter;  // chunks the lane ever moved with the peer in this direction (the engine's sent / received)
  uint64_t seen;     // the last value of the peer-written word this stream waits on
  char* rows;        // send / local: the first byte of the rows read; receive / local: of the rows written (local:
                     // `target`), set from the header on a receive; null: nothing is copied (bad input)
  char* target;      // local: the first byte written
  uint64_t lo;       // the lane's part [lo, hi) of the message's bytes
  uint64_t hi;
  int64_t bad_first;  // the offending first row and rows (bad != 0), for the record
  int64_t bad_rows;
  uint32_t chunk;    // next chunk of the lane
  uint32_t chunks;   // the lane's chunks in this launch
  int32_t peer;
  uint8_t lane;
  uint8_t kind;
  uint8_t done;
  uint8_t bad;       // the rows of this stream are out of bounds: recorded at the launch's end
};
static_assert(sizeof(RaggedStream) <= 80, "RaggedStream");

JAX_MSCCLPP_DEVICE_INLINE int64_t table_entry(const void* table, int i, int width) {
  return width == 8 ? static_cast<const int64_t*>(table)[i]
                     : static_cast<int64_t>(static_cast<const int32_t*>(table)[i]);
}

struct RaggedBlock {
  const RaggedParams& a;

  JAX_MSCCLPP_DEVICE_INLINE uint64_t chunk_bytes() const { return a.ctx.p2p_layout.chunk; }
  // Bytes of data chunk c of a lane holds, and where they start in the lane's part (the header rides in chunk 0
  // of the peer streams).
  JAX_MSCCLPP_DEVICE_INLINE uint64_t data_start(const RaggedStream& s, uint32_t c) const {
    if (s.kind == kLocal) return static_cast<uint64_t>(c) * chunk_bytes();
    return c == 0 ? 0 : (chunk_bytes() - kHeaderBytes) + static_cast<uint64_t>(c - 1) * chunk_bytes();
  }
  JAX_MSCCLPP_DEVICE_INLINE uint32_t chunks_of(int kind, uint64_t part, uint32_t lane) const {
    const uint64_t c = chunk_bytes();
    if (kind == kLocal) return static_cast<uint32_t>(p2p_ceil_div(part, c));
    if (part == 0) return lane == 0 ? 1u : 0u;  // lane 0 carries the header whatever the rows
    const uint64_t first = c - kHeaderBytes;
    return part <= first ? 1u : 1u + static_cast<uint32_t>(p2p_ceil_div(part - first, c));
  }
  JAX_MSCCLPP_DEVICE_INLINE const P2PPeerHandle& peer_of(const RaggedStream& s) const { return a.ctx.p2p[s.peer]; }
  JAX_MSCCLPP_DEVICE_INLINE uint64_t* words(const RaggedStream& s) const {
    return peer_of(s).words + s.lane * kP2PWords;
  }

  // Stream `stream` at the launch's start: peer j (rank + 1 + j) owns streams [2 * lanes * j, 2 * lanes * (j+1)),
  // sends first; the local copy's lanes follow every peer's.
  __device__ RaggedStream start(int stream) const {
    const RaggedAllToAll& c = a.call;
    const int n = a.ctx.nranks, me = a.ctx.rank, width = c.index_bytes;
    RaggedStream s{};
    const int peer_streams = 2 * kP2PLanes * (n - 1);
    if (stream < peer_streams) {
      const int j = stream / (2 * kP2PLanes), within = stream % (2 * kP2PLanes);
      s.peer = (me + 1 + j) % n;
      s.kind = within < kP2PLanes ? kSend : kReceive;
      s.lane = static_cast<uint8_t>(within % kP2PLanes);
    } else {
      s.peer = me;
      s.kind = kLocal;
      s.lane = static_cast<uint8_t>(stream - peer_streams);
    }
    int64_t rows = 0;
    if (s.kind == kReceive) {
      rows = table_entry(c.recv_sizes, s.peer, width);
      if (rows < 0) {
        s.bad = 1;
        s.bad_first = 0;
        s.bad_rows = rows;
      }
    } else {
      rows = table_entry(c.send_sizes, s.peer, width);
      const int64_t first = table_entry(c.input_offsets, s.peer, width);
      const bool inside = rows >= 0 && first >= 0 && static_cast<uint64_t>(first) <= c.operand_rows &&
                          static_cast<uint64_t>(rows) <= c.operand_rows - static_cast<uint64_t>(first);
      if (inside) {
        s.rows = const_cast<char*>(static_cast<const char*>(c.operand)) + static_cast<uint64_t>(first) * c.row_bytes;
      } else {
        s.bad = 1;
        s.bad_first = first;
        s.bad_rows = rows;
      }
      if (s.kind == kLocal) {
        const int64_t to = table_entry(c.output_offsets, me, width);
        const int64_t expected = table_entry(c.recv_sizes, me, width);
        const bool fits = to >= 0 && static_cast<uint64_t>(to) <= c.output_rows && rows >= 0 &&
                          static_cast<uint64_t>(rows) <= c.output_rows - static_cast<uint64_t>(to);
        if (!fits || expected != rows) {
          if (!s.bad) {
            s.bad_first = to;
            s.bad_rows = rows;
          }
          s.bad = 1;
          s.rows = nullptr;
        } else {
          s.target = static_cast<char*>(c.output) + static_cast<uint64_t>(to) * c.row_bytes;
        }
      }
    }
    const uint64_t bytes = rows > 0 ? static_cast<uint64_t>(rows) * c.row_bytes : 0;
    const P2PLanePart part = p2p_lane_part(bytes, s.lane);
    s.lo = part.lo;
    s.hi = part.hi;
    s.chunks = chunks_of(s.kind, part.size(), s.lane);
    s.done = s.chunks == 0;
    if (s.kind != kLocal) s.counter = words(s)[s.kind == kReceive ? kP2PReceived : kP2PSent];
    return s;
  }

  // Thread 0: whether the stream's next chunk may move now (the engine's rule; acquire, see p2p_group.cu).
  __device__ bool ready(RaggedStream& s) const {
    if (s.kind == kLocal) return true;
    const int slots = a.ctx.p2p_layout.slots;
    if (s.kind == kReceive) {
      if (s.seen < s.counter + 1) s.seen = load_acquire_sys(words(s) + kP2PDataIn);
      return s.seen >= s.counter + 1;
    }
    if (s.counter < static_cast<uint64_t>(slots)) return true;
    const uint64_t need = s.counter + 1 - slots;
    if (s.seen < need) s.seen = load_acquire_sys(words(s) + kP2PCreditIn);
    return s.seen >= need;
  }

  JAX_MSCCLPP_DEVICE_INLINE char* slot(const RaggedStream& s) const {
    const P2PLayout layout{0, a.ctx.p2p_layout.slots, chunk_bytes(), 0};
    const uint64_t at = layout.slot_offset(s.lane, s.counter);
    return (s.kind == kSend ? peer_of(s).remote_rings : peer_of(s).local_rings) + at;
  }

  // Thread 0, a receive's first chunk being ready: reads the header (ordered after the acquire in ready()). A
  // row count other than recv_sizes fails the communicator here and now; false then (the stream stops).
  __device__ bool read_header(RaggedStream& s) const {
    const volatile RaggedHeader* h = reinterpret_cast<const volatile RaggedHeader*>(slot(s));
    const int64_t first = h->first_row, rows = h->rows;
    const int64_t expected = table_entry(a.call.recv_sizes, s.peer, a.call.index_bytes);
    if (rows != expected) {
      fail(s.peer, WaitOp::kRaggedSizes, rows, expected);
      return false;
    }
    const RaggedAllToAll& c = a.call;
    const bool fits = first >= 0 && rows >= 0 && static_cast<uint64_t>(first) <= c.output_rows &&
                      static_cast<uint64_t>(rows) <= c.output_rows - static_cast<uint64_t>(first);
    if (fits && !s.bad) {
      s.rows = static_cast<char*>(c.output) + static_cast<uint64_t>(first) * c.row_bytes;
    } else if (!s.bad) {
      s.bad = 1;
      s.bad_first = first;
      s.bad_rows = rows;
    }
    return true;
  }

  // Every thread: moves the stream's next chunk.
  __device__ void move(const RaggedStream& s) const {
    const uint64_t from = s.lo + data_start(s, s.chunk);
    const uint64_t cap = s.kind != kLocal && s.chunk == 0 ? chunk_bytes() - kHeaderBytes : chunk_bytes();
    const uint64_t bytes = s.hi - from < cap ? s.hi - from : cap;
    if (s.kind == kLocal) {
      if (s.rows != nullptr) copy_bytes(s.target + from, s.rows + from, bytes, threadIdx.x, blockDim.x);
      return;
    }
    char* at = slot(s);
    const uint64_t skip = s.chunk == 0 ? kHeaderBytes : 0;
    if (s.kind == kSend) {
      if (s.chunk == 0 && threadIdx.x == 0) {
        const RaggedAllToAll& c = a.call;
        RaggedHeader* h = reinterpret_cast<RaggedHeader*>(at);
        // Rows this rank cannot read go out as none the receiver may write (it fails its own outputs too).
        h->first_row = s.rows != nullptr ? table_entry(c.output_offsets, s.peer, c.index_bytes) : kNoRows;
        h->rows = table_entry(c.send_sizes, s.peer, c.index_bytes);
      }
      if (s.rows != nullptr) copy_bytes(at + skip, s.rows + from, bytes, threadIdx.x, blockDim.x);
    } else if (s.rows != nullptr) {
      copy_bytes(s.rows + from, at + skip, bytes, threadIdx.x, blockDim.x);
    }
  }

  // Thread 0, after the barrier that follows move(): tells the peer (release) and steps to the next chunk.
  __device__ void publish_and_advance(RaggedStream& s) const {
    if (s.kind != kLocal) {
      uint64_t* remote = peer_of(s).remote_words + s.lane * kP2PWords;
      fence_acq_rel_sys();
      red_add_relaxed_sys(remote + (s.kind == kReceive ? kP2PCreditIn : kP2PDataIn), 1);
      ++s.counter;
    }
    if (++s.chunk == s.chunks) s.done = 1;
  }

  // Fails the communicator: every other rank's failed word (their waits give up at once), then this rank's record
  // (record_failure marks this rank's word after claiming the record, so that no other block of this rank, seeing
  // the word first, records a peer failure in its place).
  __device__ void fail(int peer, WaitOp op, int64_t epoch, int64_t observed) const {
    const CollectiveContext& c = a.ctx;
    const uint64_t inbox = call_inbox_offset(c.scratch_bytes);
    for (int q = 0; q < c.nranks; ++q)
      if (q != c.rank) mark_failed(collectives::remote_scratch(c, q) + inbox, c.rank);
    __threadfence_system();
    WaitSite site = c.p2p[(c.rank + 1) % c.nranks].site;
    site.peer = peer;
    ErrorRecord r{};
    r.rank = c.rank;
    r.peer = peer;
    r.op = static_cast<uint32_t>(op);
    r.epoch = static_cast<uint64_t>(epoch);
    r.observed = static_cast<uint64_t>(observed);
    record_failure(site, r);
  }
};

constexpr int kPickNone = -1;  // nothing ready: poll again
constexpr int kPickDone = -2;  // every stream of the block is done
constexpr int kPickStop = -3;  // the wait gave up, or the communicator failed (stop on failure)

__global__ void __launch_bounds__(kRaggedThreads) ragged_all_to_all_kernel(const __grid_constant__ RaggedParams a) {
  extern __shared__ RaggedStream states[];
  __shared__ int pick;
  const RaggedBlock block{a};
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const int owned = a.streams > b ? (a.streams - 1 - b) / grid + 1 : 0;
  for (int i = threadIdx.x; i < owned; i += blockDim.x) states[i] = block.start(b + i * grid);
  __syncthreads();

  WaitSite site{};
  SpinBound bound(site);
  int next = 0;  // thread 0: where the next sweep starts
  for (;;) {
    if (threadIdx.x == 0) {
      int chosen = kPickDone, stalled = -1;
      for (int t = 0; t < owned; ++t) {
        const int i = (next + t) % owned;
        RaggedStream& s = states[i];
        if (s.done) continue;
        if (block.ready(s)) {
          chosen = i;
          break;
        }
        if (stalled < 0) stalled = i;
        chosen = kPickNone;
      }
      if (chosen >= 0) {
        next = (chosen + 1) % owned;
        bound = SpinBound(site);
        RaggedStream& s = states[chosen];
        if (s.kind == kReceive && s.chunk == 0 && !block.read_header(s)) chosen = kPickStop;
      } else if (chosen == kPickNone) {
        const RaggedStream& s = states[stalled];
        site = block.peer_of(s).site;
        const int slots = a.ctx.p2p_layout.slots;
        const uint64_t target = s.kind == kReceive ? s.counter + 1 : s.counter + 1 - slots;
        if (!bound.tick(s.kind == kReceive ? WaitOp::kP2PData : WaitOp::kP2PCredit, target, s.seen))
          chosen = kPickStop;
      }
      pick = chosen;
    }
    __syncthreads();
    const int i = pick;
    if (i == kPickDone || i == kPickStop) break;
    if (i >= 0) block.move(states[i]);
    __syncthreads();
    if (i >= 0 && threadIdx.x == 0) block.publish_and_advance(states[i]);
  }
  // The lane counts for the next launch (kernel boundary: stream order makes them visible to it), then the record
  // of the first stream whose rows were out of bounds.
  for (int i = threadIdx.x; i < owned; i += blockDim.x) {
    const RaggedStream& s = states[i];
    if (s.kind != kLocal) block.words(s)[s.kind == kReceive ? kP2PReceived : kP2PSent] = s.counter;
  }
  if (threadIdx.x == 0 && a.ctx.nranks > 1) {
    for (int i = 0; i < owned; ++i) {
      const RaggedStream& s = states[i];
      if (!s.bad) continue;
      block.fail(s.peer, WaitOp::kRaggedBounds, s.bad_first, s.bad_rows);
      break;
    }
  }
}

}  // namespace

cudaError_t launch_ragged_all_to_all(const CollectiveContext& ctx, const RaggedAllToAll& call, cudaStream_t stream) {
  if (call.input_offsets == nullptr || call.send_sizes == nullptr || call.output_offsets == nullptr ||
      call.recv_sizes == nullptr || (call.index_bytes != 4 && call.index_bytes != 8) || call.row_bytes == 0)
    return cudaErrorInvalidValue;
  if ((call.operand == nullptr && call.operand_rows > 0) || (call.output == nullptr && call.output_rows > 0))
    return cudaErrorInvalidValue;
  if (ctx.nranks < 1 || ctx.rank < 0 || ctx.rank >= ctx.nranks) return cudaErrorInvalidValue;
  if (ctx.nranks > 1 && (ctx.p2p == nullptr || ctx.p2p_layout.chunk < 2 * kHeaderBytes || ctx.p2p_blocks < 1))
    return cudaErrorNotReady;
  RaggedParams a;
  a.ctx = ctx;
  a.call = call;
  if (ctx.nranks == 1) a.ctx.p2p_layout.chunk = kP2PMaxChunk;  // the local copy's pieces
  a.streams = (2 * (ctx.nranks - 1) + 1) * kP2PLanes;
  int grid = ctx.nranks == 1 ? kP2PLanes : (a.streams < ctx.p2p_blocks ? a.streams : ctx.p2p_blocks);
  if ((a.streams + grid - 1) / grid > kRaggedMaxStreamsPerBlock)
    grid = (a.streams + kRaggedMaxStreamsPerBlock - 1) / kRaggedMaxStreamsPerBlock;
  const size_t shared = static_cast<size_t>((a.streams + grid - 1) / grid) * sizeof(RaggedStream);
  ragged_all_to_all_kernel<<<grid, kRaggedThreads, shared, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace jax_mscclpp
