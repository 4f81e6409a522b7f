// launch_p2p_group (collective.h): one rank's messages of one point-to-point group, NCCL's semantics. Independent
// of the collectives: no epoch, no call inbox, no scratch half; only the rank's p2p region and counter words
// (collectives/p2p_layout.h) and its peers'. docs/architecture.md, "Point-to-point groups", states the protocol.
//
// Streams. A message's lane l belongs to the stream (peer, direction, l); a stream's parts are its messages in
// message order. Ordering both ends agree on: the k-th send of a to b pairs with the k-th receive of b from a, the
// two have the same byte count, so lane l of both carries the same parts with the same chunks, and the lane's
// chunk counts (sent on a, received on b) advance together. Chunk k of a lane uses slot k mod S of its ring.
//
//   sender of chunk k (k = sent):  credit_in >= k + 1 - S (acquire; no wait for k < S); the block writes slot
//       k mod S of the receiver's ring; block barrier; one thread: fence.acq_rel.sys + relaxed add of 1 to the
//       receiver's data_in (the D2DSemaphore signal, semaphore.cuh).
//   receiver of chunk k (k = received):  data_in >= k + 1 (acquire); the block copies the slot into the output;
//       block barrier; one thread: fence.acq_rel.sys + relaxed add of 1 to the sender's credit_in.
//
// The fence orders the block's slot writes (sender) or slot reads (receiver), which the barrier made part of what
// the signalling thread observed, before its add; the acquire load and the barrier after it order the peer's
// accesses before the block's. A send does not wait for its last credits: the next use of the slot does.
//
// Progress. Each stream of a launch is owned by one thread block, which processes its units in message order; a
// block that owns several streams moves whichever is ready: thread 0 sweeps its streams round-robin (a counter
// load each, only where the last value seen does not already answer), the block moves one chunk of the first
// ready one, and sweeps again. A block never waits on one stream while another of its streams could move, so a
// launch stalls only when every unfinished stream of it waits for a peer (the deadlock argument is in
// docs/architecture.md). A sweep that finds nothing ready ticks a SpinBound naming the first waiting stream's
// peer (WaitOp kP2PData or kP2PCredit; the bound restarts at each progress, so the limit is on time without
// progress): a peer that never makes its call ends in a record naming rank, peer and op, and, where the rank stops
// on failure, the kernel ends (its counters stored as far as it got).
//
// Failed outputs. Where the rank stops on failure (CollectiveContext::failed_outputs), each block ends by poisoning
// every receive of the launch should the rank have failed by then (failed_outputs.cuh): the messages of its receive
// groups and the self receives, whose copies precede the kernel on the stream, carried after the messages the
// groups hold (parts the kernel does not move).
#include <algorithm>
#include <cstring>

#include "collectives/collective.h"
#include "collectives/failed_outputs.cuh"
#include "collectives/stream_service.cuh"
#include "jax_mscclpp/atomics.cuh"
#include "jax_mscclpp/copy.cuh"
#include "jax_mscclpp/error_record.cuh"

namespace jax_mscclpp {
namespace {

constexpr int kP2PThreads = 512;
// Launches of at most this many messages use a kernel whose parameters stay under 4 KB (faster to launch).
constexpr int kP2PSmallMessages = 64;
// The most streams one block owns (their state is in shared memory, 32 bytes each).
constexpr int kP2PMaxStreamsPerBlock = 1024;
constexpr int kKernelParamBytes = 32764;  // sm_70+ with CUDA 12.1+

// A message as the kernel sees it (peer and direction are its group's).
struct P2PPart {
  char* buffer;
  uint64_t bytes;
};

// A run of messages with one (peer, direction), in message order: messages [first, first + count) of the launch.
// Its streams are lanes 0..lanes-1 (lanes: the most any of its messages has), numbered from first_stream.
struct P2PGroupEntry {
  int32_t peer;
  uint16_t first;
  uint16_t count;
  uint16_t first_stream;
  uint8_t lanes;
  uint8_t receive;
};

struct P2PHeader {
  const P2PPeerHandle* peers;
  const uint64_t* failed;  // the rank's failed word where the launch poisons its receives (failed_outputs.cuh)
  uint64_t chunk;
  int32_t slots;
  int32_t groups;
  int32_t streams;
  int32_t self_receives;  // parts after the groups' messages: the self receives, poisoned only
};

template <int kMax>
struct P2PLaunchParams {
  P2PHeader h;
  P2PPart messages[kMax];
  P2PGroupEntry groups[kMax];
};
static_assert(sizeof(P2PLaunchParams<kP2PMaxMessages>) <= kKernelParamBytes, "kP2PMaxMessages over the params");
static_assert(sizeof(P2PLaunchParams<kP2PSmallMessages>) <= 4096, "the small launch over 4 KB");
static_assert(kP2PMaxMessages <= 65535 && kP2PMaxMessages * kP2PLanes <= 65535, "uint16_t indices");

// One stream's progress within a launch (shared memory; written by thread 0 only, between block barriers).
struct StreamState {
  uint64_t counter;  // chunks the lane ever moved with the peer in this direction (sent / received)
  uint64_t seen;     // the last value of the peer-written word this stream waits on (data_in / credit_in)
  uint32_t chunk;    // next chunk of the current message's part
  uint16_t message;  // the current message
  uint16_t group;
  uint8_t lane;
  uint8_t receive;
  uint8_t done;
  uint8_t unused;
};
static_assert(sizeof(StreamState) == 32, "StreamState");

template <int kMax>
struct P2PBlock {
  const P2PLaunchParams<kMax>& a;

  __device__ uint64_t chunks_of(uint64_t bytes, uint32_t lane) const {
    return p2p_ceil_div(p2p_lane_part(bytes, lane).size(), a.h.chunk);
  }
  // The first message of group g from `from` on whose lane part is not empty; -1: none.
  __device__ int next_message(const P2PGroupEntry& g, int from, uint32_t lane) const {
    for (int m = from; m < g.first + g.count; ++m)
      if (p2p_lane_part(a.messages[m].bytes, lane).size() != 0) return m;
    return -1;
  }
  __device__ uint64_t* words(const StreamState& s) const {
    return a.h.peers[a.groups[s.group].peer].words + s.lane * kP2PWords;
  }
  // Thread 0: whether the stream's next chunk may move now (loads the peer's word only when the last value seen
  // does not already allow it; acquire, so what the peer did before its add is ordered before this block's
  // accesses after the next barrier).
  __device__ bool ready(StreamState& s) const {
    if (s.receive) {
      if (s.seen < s.counter + 1) s.seen = load_acquire_sys(words(s) + kP2PDataIn);
      return s.seen >= s.counter + 1;
    }
    if (s.counter < static_cast<uint64_t>(a.h.slots)) return true;
    const uint64_t need = s.counter + 1 - a.h.slots;
    if (s.seen < need) s.seen = load_acquire_sys(words(s) + kP2PCreditIn);
    return s.seen >= need;
  }
  // Every thread: moves the stream's next chunk between the message and the slot.
  __device__ void move(const StreamState& s) const {
    const P2PPart& m = a.messages[s.message];
    const P2PLanePart part = p2p_lane_part(m.bytes, s.lane);
    const uint64_t lo = part.lo + static_cast<uint64_t>(s.chunk) * a.h.chunk;
    const uint64_t bytes = part.hi - lo < a.h.chunk ? part.hi - lo : a.h.chunk;
    const P2PPeerHandle& peer = a.h.peers[a.groups[s.group].peer];
    const P2PLayout layout{0, a.h.slots, a.h.chunk, 0};
    const uint64_t slot = layout.slot_offset(s.lane, s.counter);
    if (s.receive) {
      copy_bytes(m.buffer + lo, peer.local_rings + slot, bytes, threadIdx.x, blockDim.x);
    } else {
      copy_bytes(peer.remote_rings + slot, m.buffer + lo, bytes, threadIdx.x, blockDim.x);
    }
  }
  // Thread 0, after the barrier that follows move(): tells the peer (release) and steps to the next chunk.
  __device__ void publish_and_advance(StreamState& s) const {
    const P2PGroupEntry& g = a.groups[s.group];
    uint64_t* remote = a.h.peers[g.peer].remote_words + s.lane * kP2PWords;
    fence_acq_rel_sys();
    red_add_relaxed_sys(remote + (s.receive ? kP2PCreditIn : kP2PDataIn), 1);
    ++s.counter;
    if (++s.chunk < chunks_of(a.messages[s.message].bytes, s.lane)) return;
    s.chunk = 0;
    const int next = next_message(g, s.message + 1, s.lane);
    if (next < 0) {
      s.done = 1;
    } else {
      s.message = static_cast<uint16_t>(next);
    }
  }
  // Stream `stream` of the launch, at the launch's start: its group (the last whose first_stream <= stream), lane,
  // first message and the lane's count so far.
  __device__ StreamState start(int stream) const {
    int lo = 0, hi = a.h.groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (a.groups[mid].first_stream <= stream) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const P2PGroupEntry& g = a.groups[lo];
    StreamState s{};
    s.group = static_cast<uint16_t>(lo);
    s.lane = static_cast<uint8_t>(stream - g.first_stream);
    s.receive = g.receive;
    s.counter = words(s)[s.receive ? kP2PReceived : kP2PSent];
    const int first = next_message(g, g.first, s.lane);
    s.done = first < 0;
    s.message = static_cast<uint16_t>(first < 0 ? g.first : first);
    return s;
  }
};

// Block b owns streams b, b + gridDim.x, ... (state in dynamic shared memory).
template <int kMax>
__global__ void __launch_bounds__(kP2PThreads) p2p_group_kernel(const __grid_constant__ P2PLaunchParams<kMax> a) {
  extern __shared__ StreamState states[];
  const P2PBlock<kMax> block{a};
  const int owned = a.h.streams > static_cast<int>(blockIdx.x)
                        ? (a.h.streams - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1
                        : 0;
  for (int i = threadIdx.x; i < owned; i += blockDim.x) states[i] = block.start(blockIdx.x + i * gridDim.x);
  __syncthreads();

  serve_streams(
      states, owned, block, [](StreamState&) { return true; },
      [&](const StreamState& s) {
        return StreamWait{a.h.peers[a.groups[s.group].peer].site, s.receive ? WaitOp::kP2PData : WaitOp::kP2PCredit,
                          s.receive ? s.counter + 1 : s.counter + 1 - a.h.slots};
      });
  // The lane counts for the next launch (kernel boundary: stream order makes them visible to it).
  for (int i = threadIdx.x; i < owned; i += blockDim.x) {
    const StreamState& s = states[i];
    block.words(s)[s.receive ? kP2PReceived : kP2PSent] = s.counter;
  }
  if (!block_saw_failure(a.h.failed)) return;
  int parts = 0;
  for (int g = 0; g < a.h.groups; ++g) {
    const P2PGroupEntry& group = a.groups[g];
    parts = group.first + group.count;
    if (!group.receive) continue;
    for (int m = group.first; m < parts; ++m) poison_bytes(a.messages[m].buffer, a.messages[m].bytes);
  }
  for (int m = parts; m < parts + a.h.self_receives; ++m) poison_bytes(a.messages[m].buffer, a.messages[m].bytes);
}

// Host: the launch of this rank's messages to other ranks (bytes > 0), `order` their indices; where the launch
// poisons its receives, the self receives (`selves`, `nselves` of them) follow them among the parts.
template <int kMax>
cudaError_t launch_streams(const CollectiveContext& ctx, const P2PMessage* messages, const int* order, int count,
                           const int* selves, int nselves, cudaStream_t stream) {
  P2PLaunchParams<kMax> a;
  std::memset(&a.h, 0, sizeof(a.h));
  a.h.peers = ctx.p2p;
  a.h.failed = ctx.failed_outputs.failed;
  a.h.chunk = ctx.p2p_layout.chunk;
  a.h.slots = ctx.p2p_layout.slots;
  int groups = 0, streams = 0;
  for (int k = 0; k < count; ++k) {
    const P2PMessage& m = messages[order[k]];
    a.messages[k] = {m.buffer, m.bytes};
    const uint8_t lanes = static_cast<uint8_t>(p2p_lanes(m.bytes));
    if (groups > 0 && a.groups[groups - 1].peer == m.peer && a.groups[groups - 1].receive == m.receive) {
      P2PGroupEntry& g = a.groups[groups - 1];
      ++g.count;
      if (lanes > g.lanes) {
        streams += lanes - g.lanes;
        g.lanes = lanes;
      }
      continue;
    }
    a.groups[groups++] = {m.peer, static_cast<uint16_t>(k), 1, static_cast<uint16_t>(streams), lanes,
                          static_cast<uint8_t>(m.receive)};
    streams += lanes;
  }
  a.h.groups = groups;
  a.h.streams = streams;
  if (a.h.failed != nullptr) {
    for (int j = 0; j < nselves; ++j) a.messages[count + j] = {messages[selves[j]].buffer, messages[selves[j]].bytes};
    a.h.self_receives = nselves;
  }
  // One block per stream up to the context's cap (the blocks must be co-resident: their peers' blocks wait for
  // them), and never more streams a block than its shared memory holds.
  int grid = streams < ctx.p2p_blocks ? streams : ctx.p2p_blocks;
  if (grid < 1) grid = 1;
  if ((streams + grid - 1) / grid > kP2PMaxStreamsPerBlock) grid = (streams + kP2PMaxStreamsPerBlock - 1) / kP2PMaxStreamsPerBlock;
  const size_t shared = static_cast<size_t>((streams + grid - 1) / grid) * sizeof(StreamState);
  p2p_group_kernel<kMax><<<grid, kP2PThreads, shared, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_p2p_group(const CollectiveContext& ctx, const P2PMessage* messages, int count,
                             cudaStream_t stream) {
  if (count < 0 || count > kP2PMaxMessages || (count > 0 && messages == nullptr)) return cudaErrorInvalidValue;
  if (ctx.nranks < 1 || ctx.rank < 0 || ctx.rank >= ctx.nranks) return cudaErrorInvalidValue;
  // Everything is checked before anything is enqueued.
  int self_sends[kP2PMaxMessages], self_receives[kP2PMaxMessages], remote[kP2PMaxMessages];
  int nsends = 0, nreceives = 0, nremote = 0;
  for (int k = 0; k < count; ++k) {
    const P2PMessage& m = messages[k];
    if (m.peer < 0 || m.peer >= ctx.nranks || (m.receive != 0 && m.receive != 1)) return cudaErrorInvalidValue;
    if (m.bytes > 0 && m.buffer == nullptr) return cudaErrorInvalidValue;
    if (m.peer == ctx.rank) {
      (m.receive ? self_receives[nreceives++] : self_sends[nsends++]) = k;
    } else if (m.bytes > 0) {
      remote[nremote++] = k;
    }
  }
  if (nsends != nreceives) return cudaErrorInvalidValue;
  for (int j = 0; j < nsends; ++j)
    if (messages[self_sends[j]].bytes != messages[self_receives[j]].bytes) return cudaErrorInvalidValue;
  if (nremote > 0 && (ctx.p2p == nullptr || !ctx.p2p_layout.usable() || ctx.p2p_blocks < 1))
    return cudaErrorNotReady;

  for (int j = 0; j < nsends; ++j) {
    const P2PMessage &from = messages[self_sends[j]], &to = messages[self_receives[j]];
    if (from.bytes == 0 || from.buffer == to.buffer) continue;
    const cudaError_t e = cudaMemcpyAsync(to.buffer, from.buffer, from.bytes, cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return e;
  }
  if (nremote == 0) return cudaSuccess;
  // Messages grouped by (peer, direction), message order kept within a group.
  std::stable_sort(remote, remote + nremote, [messages](int x, int y) {
    const P2PMessage &a = messages[x], &b = messages[y];
    return a.peer != b.peer ? a.peer < b.peer : a.receive < b.receive;
  });
  const int parts = nremote + (ctx.failed_outputs.failed != nullptr ? nreceives : 0);  // at most count
  return parts <= kP2PSmallMessages
             ? launch_streams<kP2PSmallMessages>(ctx, messages, remote, nremote, self_receives, nreceives, stream)
             : launch_streams<kP2PMaxMessages>(ctx, messages, remote, nremote, self_receives, nreceives, stream);
}

}  // namespace jax_mscclpp
