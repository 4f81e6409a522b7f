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
//
// Direct exchange (P2PPeerHandle::direct: the peer is a rank of this process, its device addresses valid here).
// The rows skip the rings: each lane of the send to p writes its part of the rows straight into p's output, so
// the rows cross memory once. The words (p2p_layout.h, P2PWord) are lane 0's of the pair unless said:
//   - receiver, at its launch's start: writes its output address and bytes into the sender's kP2POutputIn and
//     kP2POutputBytesIn, then (release) adds 1 to the sender's kP2PPostedIn: launch k of the pair is posted when
//     that word reaches k (kP2PDirectReceived counts the receiver's launches, kP2PDirectSent each sender lane's);
//   - sender lane, once posted (acquire): checks its rows against the posted bytes (rows that do not fit are not
//     written; the receiver records them as the ring's receiver does), writes them in pieces of kDirectPieceBytes,
//     then (release) adds 1 to the receiver's kP2PWrittenIn, lane 0 having first written its output_offsets and
//     send_sizes for the receiver into kP2PFirstRowIn and kP2PRowsIn (kNoRows: rows it cannot read);
//   - receiver: done with the pair when kP2PWrittenIn reaches k * kP2PLanes (acquire); it then checks the row
//     count and the bounds as the ring's receiver checks its header. Its other receive lanes are idle.
// A receiver that ends its launch without the pair done (a timeout, a failure) must not leave a sender writing
// into an output the stream has handed back. Each piece is a store-load handshake: the sender adds 1 to the
// receiver's kP2PWritersIn, fences (sequentially consistent) and reads its own kP2PClosedIn, writing only if the
// receiver has not closed launch k, then (release) subtracts 1; the receiver closes (writes k into the sender's
// kP2PClosedIn), fences, and waits until kP2PWritersIn is 0. Of the two, at least one sees the other's store: a
// piece is never written after the receiver's kernel ended. A sender that finds its launch closed stops, marks
// its own failed word with the receiver's rank (its other waits give up) and records that the receiver failed.
#include <cstdint>

#include "collectives/collective.h"
#include "collectives/collective_common.cuh"
#include "collectives/stream_service.cuh"
#include "jax_mscclpp/atomics.cuh"
#include "jax_mscclpp/copy.cuh"
#include "jax_mscclpp/error_record.cuh"

namespace jax_mscclpp {
namespace {

constexpr int kRaggedThreads = 512;
constexpr uint64_t kHeaderBytes = 16;
constexpr int64_t kNoRows = INT64_MIN;
constexpr int kRaggedMaxStreamsPerBlock = 512;  // shared memory: 88 bytes a stream
constexpr uint64_t kDirectPieceBytes = 512ull << 10;  // what a block writes into a peer's output in one step
constexpr uint64_t kDirectGraceNs = 1000ull * 1000 * 1000;  // a closing receiver's wait for a piece in flight

// What travels in front of every lane's first chunk.
struct RaggedHeader {
  int64_t first_row;  // the sender's output_offsets[receiver]; kNoRows: the sender's rows were out of its bounds
  int64_t rows;       // the sender's send_sizes[receiver]
};

// kDirectSend / kDirectReceive: a pair in the direct exchange; kIdle: its receive lanes but lane 0.
enum StreamKind : uint8_t { kSend = 0, kReceive = 1, kLocal = 2, kDirectSend = 3, kDirectReceive = 4, kIdle = 5 };

struct RaggedParams {
  CollectiveContext ctx;
  RaggedAllToAll call;
  int32_t streams;
};

// One stream's progress (shared memory; written by thread 0 only, between block barriers).
struct RaggedStream {
  uint64_t counter;  // chunks the lane ever moved with the peer in this direction (the engine's sent / received);
                     // direct: the pair's launches (kP2PDirectSent / kP2PDirectReceived)
  uint64_t seen;     // the last value of the peer-written word this stream waits on
  char* rows;        // send / local: the first byte of the rows read; receive / local: of the rows written (local:
                     // `target`), set from the header on a receive; null: nothing is copied (bad input)
  char* target;      // local, direct send: the first byte written (direct: in the peer's output, from its post;
                     // null: the rows do not fit there or cannot be read)
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
  uint8_t closed;    // direct send: the receiver closed this launch (it failed): stopped, recorded at the end
};
static_assert(sizeof(RaggedStream) <= 88, "RaggedStream");

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
    if (s.kind == kDirectSend) return static_cast<uint64_t>(c) * kDirectPieceBytes;
    return c == 0 ? 0 : (chunk_bytes() - kHeaderBytes) + static_cast<uint64_t>(c - 1) * chunk_bytes();
  }
  JAX_MSCCLPP_DEVICE_INLINE uint32_t chunks_of(int kind, uint64_t part, uint32_t lane) const {
    const uint64_t c = chunk_bytes();
    if (kind == kLocal) return static_cast<uint32_t>(p2p_ceil_div(part, c));
    if (kind == kDirectSend) return part == 0 ? 1u : static_cast<uint32_t>(p2p_ceil_div(part, kDirectPieceBytes));
    if (kind == kDirectReceive) return 1u;  // the pair's end: the senders' lanes written
    if (kind == kIdle) return 0u;
    if (part == 0) return lane == 0 ? 1u : 0u;  // lane 0 carries the header whatever the rows
    const uint64_t first = c - kHeaderBytes;
    return part <= first ? 1u : 1u + static_cast<uint32_t>(p2p_ceil_div(part - first, c));
  }
  JAX_MSCCLPP_DEVICE_INLINE const P2PPeerHandle& peer_of(const RaggedStream& s) const { return a.ctx.p2p[s.peer]; }
  JAX_MSCCLPP_DEVICE_INLINE uint64_t* words(const RaggedStream& s) const {
    return peer_of(s).words + s.lane * kP2PWords;
  }
  // The direct exchange's words of the pair (lane 0's): this rank's, and the peer's about this rank.
  JAX_MSCCLPP_DEVICE_INLINE uint64_t* pair_words(const RaggedStream& s) const { return peer_of(s).words; }
  JAX_MSCCLPP_DEVICE_INLINE uint64_t* peer_pair_words(const RaggedStream& s) const {
    return peer_of(s).remote_words;
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
      if (a.ctx.p2p[s.peer].direct) s.kind = s.kind == kSend ? kDirectSend : s.lane == 0 ? kDirectReceive : kIdle;
    } else {
      s.peer = me;
      s.kind = kLocal;
      s.lane = static_cast<uint8_t>(stream - peer_streams);
    }
    int64_t rows = 0;
    if (s.kind == kIdle) {
      s.done = 1;
      return s;
    }
    if (s.kind == kReceive || s.kind == kDirectReceive) {
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
    if (s.kind == kSend || s.kind == kReceive) s.counter = words(s)[s.kind == kReceive ? kP2PReceived : kP2PSent];
    if (s.kind == kDirectSend) s.counter = words(s)[kP2PDirectSent];
    if (s.kind == kDirectReceive) {
      s.counter = pair_words(s)[kP2PDirectReceived];
      post_output(s);
    }
    return s;
  }

  // Direct receive, at the launch's start: where the sender may write (the whole output; it writes only its rows).
  __device__ void post_output(const RaggedStream& s) const {
    uint64_t* theirs = peer_pair_words(s);
    store_relaxed_sys(theirs + kP2POutputIn, reinterpret_cast<uint64_t>(a.call.output));
    store_relaxed_sys(theirs + kP2POutputBytesIn, a.call.output_rows * a.call.row_bytes);
    fence_acq_rel_sys();
    red_add_relaxed_sys(theirs + kP2PPostedIn, 1);
  }

  // Thread 0, a direct send's first piece being ready (the post acquired): where its rows go, if they fit.
  __device__ void read_post(RaggedStream& s) const {
    const uint64_t* mine = pair_words(s);
    char* output = reinterpret_cast<char*>(load_relaxed_sys(mine + kP2POutputIn));
    const uint64_t output_rows = load_relaxed_sys(mine + kP2POutputBytesIn) / a.call.row_bytes;
    const int64_t first = table_entry(a.call.output_offsets, s.peer, a.call.index_bytes);
    const int64_t rows = table_entry(a.call.send_sizes, s.peer, a.call.index_bytes);
    const bool fits = first >= 0 && rows >= 0 && static_cast<uint64_t>(first) <= output_rows &&
                      static_cast<uint64_t>(rows) <= output_rows - static_cast<uint64_t>(first);
    s.target = fits && s.rows != nullptr ? output + static_cast<uint64_t>(first) * a.call.row_bytes : nullptr;
  }

  // Thread 0, before a direct send's piece: whether it may write it (the handshake with a closing receiver). True:
  // this piece counts in the receiver's kP2PWritersIn until publish_and_advance.
  __device__ bool begin_piece(RaggedStream& s) const {
    uint64_t* theirs = peer_pair_words(s);
    red_add_relaxed_sys(theirs + kP2PWritersIn, 1);
    fence_sc_sys();
    if (load_relaxed_sys(pair_words(s) + kP2PClosedIn) < s.counter + 1) return true;
    red_add_relaxed_sys(theirs + kP2PWritersIn, ~0ull);  // - 1
    s.closed = 1;
    // The receiver failed the communicator: this rank's other waits give up at once, naming it.
    char* inbox = a.ctx.scratch + call_inbox_offset(a.ctx.scratch_bytes);
    if (load_relaxed_sys(failed_word(inbox)) == 0) mark_failed(inbox, s.peer);
    __threadfence_system();
    return false;
  }

  // Thread 0, a direct receive ending unfinished: no sender piece may land after this kernel.
  __device__ void close(const RaggedStream& s) const {
    store_relaxed_sys(peer_pair_words(s) + kP2PClosedIn, s.counter + 1);
    fence_sc_sys();
    const uint64_t until = global_timer_ns() + kDirectGraceNs;
    while (load_acquire_sys(pair_words(s) + kP2PWritersIn) != 0 && global_timer_ns() < until) {
    }
  }

  // Thread 0, a direct receive being ready: the sender's report, checked as read_header checks a header.
  __device__ bool read_report(RaggedStream& s) const {
    const uint64_t* mine = pair_words(s);
    const int64_t first = static_cast<int64_t>(load_relaxed_sys(mine + kP2PFirstRowIn));
    const int64_t rows = static_cast<int64_t>(load_relaxed_sys(mine + kP2PRowsIn));
    return check_rows(s, first, rows);
  }

  // Thread 0: whether the stream's next chunk may move now (the engine's rule; acquire, see p2p_group.cu).
  __device__ bool ready(RaggedStream& s) const {
    if (s.kind == kLocal) return true;
    if (s.kind == kDirectSend) {
      if (s.chunk > 0) return true;
      if (s.seen < s.counter + 1) s.seen = load_acquire_sys(pair_words(s) + kP2PPostedIn);
      return s.seen >= s.counter + 1;
    }
    if (s.kind == kDirectReceive) {
      const uint64_t need = (s.counter + 1) * kP2PLanes;
      if (s.seen < need) s.seen = load_acquire_sys(pair_words(s) + kP2PWrittenIn);
      return s.seen >= need;
    }
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
    return check_rows(s, h->first_row, h->rows);
  }

  // Thread 0: the sender's first row and row count for this rank, against recv_sizes and the output; sets the
  // rows written on a ring's receive. False: the counts differ, the communicator failed (the stream stops).
  __device__ bool check_rows(RaggedStream& s, int64_t first, int64_t rows) const {
    const int64_t expected = table_entry(a.call.recv_sizes, s.peer, a.call.index_bytes);
    if (rows != expected) {
      fail(s.peer, WaitOp::kRaggedSizes, rows, expected);
      return false;
    }
    const RaggedAllToAll& c = a.call;
    const bool fits = first >= 0 && rows >= 0 && static_cast<uint64_t>(first) <= c.output_rows &&
                      static_cast<uint64_t>(rows) <= c.output_rows - static_cast<uint64_t>(first);
    if (fits && !s.bad) {
      if (s.kind == kReceive) s.rows = static_cast<char*>(c.output) + static_cast<uint64_t>(first) * c.row_bytes;
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
    const uint64_t cap = s.kind == kDirectSend             ? kDirectPieceBytes
                         : s.kind != kLocal && s.chunk == 0 ? chunk_bytes() - kHeaderBytes
                                                            : chunk_bytes();
    const uint64_t bytes = s.hi - from < cap ? s.hi - from : cap;
    if (s.kind == kLocal || s.kind == kDirectSend) {
      if (s.target != nullptr && s.rows != nullptr && !s.closed)
        copy_bytes(s.target + from, s.rows + from, bytes, threadIdx.x, blockDim.x);
      return;
    }
    if (s.kind == kDirectReceive) return;
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
    if (s.kind == kDirectSend) {
      uint64_t* theirs = peer_pair_words(s);
      if (s.closed) {
        s.done = 1;
        return;
      }
      if (s.target != nullptr) {  // the piece was begun (begin_piece): its writes, then out of the writers
        fence_acq_rel_sys();
        red_add_relaxed_sys(theirs + kP2PWritersIn, ~0ull);  // - 1
      }
      if (++s.chunk < s.chunks) return;
      if (s.lane == 0) {  // the report, ordered before this lane's written count by the fence below
        const RaggedAllToAll& c = a.call;
        const int64_t first = s.rows != nullptr ? table_entry(c.output_offsets, s.peer, c.index_bytes) : kNoRows;
        store_relaxed_sys(theirs + kP2PFirstRowIn, static_cast<uint64_t>(first));
        store_relaxed_sys(theirs + kP2PRowsIn,
                          static_cast<uint64_t>(table_entry(c.send_sizes, s.peer, c.index_bytes)));
      }
      fence_acq_rel_sys();
      red_add_relaxed_sys(theirs + kP2PWrittenIn, 1);
      ++s.counter;
      s.done = 1;
      return;
    }
    if (s.kind == kDirectReceive) {
      ++s.counter;
      s.done = 1;
      return;
    }
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

__global__ void __launch_bounds__(kRaggedThreads) ragged_all_to_all_kernel(const __grid_constant__ RaggedParams a) {
  extern __shared__ RaggedStream states[];
  const RaggedBlock block{a};
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const int owned = a.streams > b ? (a.streams - 1 - b) / grid + 1 : 0;
  for (int i = threadIdx.x; i < owned; i += blockDim.x) states[i] = block.start(b + i * grid);
  __syncthreads();

  // A piece is readied before it moves: a received message's header, a direct receive's report of what was
  // written, a direct send's posted destination.
  const auto prepare = [&](RaggedStream& s) {
    if (s.kind == kReceive && s.chunk == 0) return block.read_header(s);
    if (s.kind == kDirectReceive) return block.read_report(s);
    if (s.kind == kDirectSend) {
      if (s.chunk == 0) block.read_post(s);
      if (s.target != nullptr) block.begin_piece(s);
    }
    return true;
  };
  const auto wait_of = [&](const RaggedStream& s) {
    const WaitSite site = block.peer_of(s).site;
    if (s.kind == kDirectSend) return StreamWait{site, WaitOp::kRaggedPosted, s.counter + 1};
    if (s.kind == kDirectReceive) return StreamWait{site, WaitOp::kRaggedWritten, (s.counter + 1) * kP2PLanes};
    if (s.kind == kReceive) return StreamWait{site, WaitOp::kP2PData, s.counter + 1};
    return StreamWait{site, WaitOp::kP2PCredit, s.counter + 1 - a.ctx.p2p_layout.slots};
  };
  serve_streams(states, owned, block, prepare, wait_of);
  // The lane counts for the next launch (kernel boundary: stream order makes them visible to it); the direct
  // receives this launch did not finish closed; then the record of the first stream whose rows were out of bounds,
  // else of a direct send whose receiver closed the launch.
  for (int i = threadIdx.x; i < owned; i += blockDim.x) {
    const RaggedStream& s = states[i];
    if (s.kind == kSend || s.kind == kReceive) block.words(s)[s.kind == kReceive ? kP2PReceived : kP2PSent] = s.counter;
    if (s.kind == kDirectSend) block.words(s)[kP2PDirectSent] = s.counter;
    if (s.kind == kDirectReceive) block.pair_words(s)[kP2PDirectReceived] = s.counter;
    if (s.kind == kDirectReceive && !s.done) block.close(s);
  }
  if (threadIdx.x == 0 && a.ctx.nranks > 1) {
    int closed = -1;
    for (int i = 0; i < owned; ++i) {
      const RaggedStream& s = states[i];
      if (s.closed && closed < 0) closed = i;
      if (!s.bad) continue;
      block.fail(s.peer, WaitOp::kRaggedBounds, s.bad_first, s.bad_rows);
      closed = -1;
      break;
    }
    if (closed >= 0) {
      const RaggedStream& s = states[closed];
      WaitSite site = block.peer_of(s).site;
      peer_failed(site, WaitOp::kRaggedPosted, s.counter + 1, s.seen, 0, s.peer);
    }
  }
  poison_failed_outputs(a.ctx.failed_outputs);
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
