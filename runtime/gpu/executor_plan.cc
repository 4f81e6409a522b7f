#include "executor_plan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

#include "check.h"

namespace jax_mscclpp::cuda {
namespace {

using host::ChunkRef;
using host::HostPlan;
using host::PlanBuffer;
using host::PlanChannel;
using host::PlanChannelType;
using host::PlanOp;
using host::PlanOpCode;
using host::PlanRank;

constexpr size_t kMaxSharedBytes = 48 * 1024;  // without opting in to more per kernel
constexpr int kDefaultThreads = 512;

int chunk_total(const HostPlan& plan, PlanBuffer buffer) {
  switch (buffer) {
    case PlanBuffer::kInput: return plan.input_blocks * plan.chunks_per_block;
    case PlanBuffer::kOutput: return plan.output_blocks * plan.chunks_per_block;
    case PlanBuffer::kScratch: return plan.scratch_chunks;
    default: return 0;
  }
}

// Scratch chunk renumbering: chunks no operation of any rank names take no space (fused-away temporaries).
// Monotone, so a range of named chunks stays a range.
std::vector<int32_t> scratch_renumbering(const HostPlan& plan) {
  std::vector<char> used(static_cast<size_t>(std::max(plan.scratch_chunks, 0)), 0);
  auto mark = [&](const ChunkRef& c) {
    if (c.buffer != PlanBuffer::kScratch) return;
    for (int t = 0; t < c.count; ++t) {
      const int i = c.index + t;
      if (i >= 0 && i < plan.scratch_chunks) used[i] = 1;
    }
  };
  for (const auto& rank : plan.ranks)
    for (const auto& tb : rank.threadblocks)
      for (const PlanOp& op : tb) {
        mark(op.dst);
        mark(op.src);
        for (const auto& s : op.srcs) mark(s);
        for (const auto& s : op.packet_srcs) mark(s.chunk);
        for (const auto& s : op.remotes) mark(s.chunk);
      }
  std::vector<int32_t> renumber(used.size() + 1, 0);
  for (size_t i = 0; i < used.size(); ++i) renumber[i + 1] = renumber[i] + used[i];
  return renumber;  // renumber[i]: new index of chunk i; renumber.back(): chunks kept
}

bool is_port_put(const PlanOp& op, const PlanRank& rank) {
  return (op.code == PlanOpCode::kPut || op.code == PlanOpCode::kPutWithSignal) && op.channel >= 0 &&
         op.channel < static_cast<int>(rank.channels.size()) &&
         rank.channels[op.channel].type == PlanChannelType::kPort;
}

int staging_of(const PlanRank& rank) {
  int n = 0;
  for (const auto& tb : rank.threadblocks)
    for (const PlanOp& op : tb)
      if (is_port_put(op, rank) && op.src.buffer != PlanBuffer::kScratch) n += std::max(op.src.count, 0);
  return n;
}

// One thread block's program image as it is built (executor.h, PlanImage).
struct ThreadBlockImage {
  std::vector<jax_mscclpp::PlanChannel> channels;
  std::vector<jax_mscclpp::PlanOp> ops;
  std::vector<PlanRef> refs;
  std::vector<int32_t> members;

  static uint32_t round16(size_t bytes) { return static_cast<uint32_t>((bytes + 15) / 16 * 16); }
  uint32_t ops_offset() const {
    return static_cast<uint32_t>(sizeof(PlanImage) + channels.size() * sizeof(jax_mscclpp::PlanChannel));
  }
  uint32_t refs_offset() const { return ops_offset() + round16(ops.size() * sizeof(jax_mscclpp::PlanOp)); }
  uint32_t members_offset() const { return refs_offset() + round16(refs.size() * sizeof(PlanRef)); }
  uint32_t bytes() const { return members_offset() + round16(members.size() * sizeof(int32_t)); }

  // Writes the image at `dst` (bytes() bytes, zeroed by the caller).
  void write(char* dst) const {
    PlanImage head{};
    head.n_channels = static_cast<int32_t>(channels.size());
    head.n_ops = static_cast<int32_t>(ops.size());
    head.n_refs = static_cast<int32_t>(refs.size());
    head.n_members = static_cast<int32_t>(members.size());
    head.ops_offset = ops_offset();
    head.refs_offset = refs_offset();
    head.members_offset = members_offset();
    std::memcpy(dst, &head, sizeof(head));
    auto put = [&](uint32_t offset, const auto& v) {
      if (!v.empty()) std::memcpy(dst + offset, v.data(), v.size() * sizeof(v[0]));
    };
    put(sizeof(PlanImage), channels);
    put(ops_offset(), ops);
    put(refs_offset(), refs);
    put(members_offset(), members);
  }
};

// The executor's schedule of one thread block (executor.h, "Groups"): memory put_with_signal split, signals on
// memory channels deferred past the memory puts and signals that follow them, then groups marked.
void schedule_groups(ThreadBlockImage& tb) {
  namespace pcodes = plan_codes;
  auto on_memory = [&](const jax_mscclpp::PlanOp& op) {
    if (op.channel < 0) return false;
    const int kind = tb.channels[op.channel].kind;
    return kind == pcodes::kMemory || kind == pcodes::kSelfMemory;
  };
  std::vector<jax_mscclpp::PlanOp> ops;
  for (const auto& op : tb.ops) {
    if (op.code == pcodes::kPutWithSignal && on_memory(op)) {
      jax_mscclpp::PlanOp put = op, signal = op;
      put.code = pcodes::kPut;
      signal.code = pcodes::kSignal;
      ops.push_back(put);
      ops.push_back(signal);
    } else {
      ops.push_back(op);
    }
  }
  auto movable = [&](const jax_mscclpp::PlanOp& op) {
    return on_memory(op) && (op.code == pcodes::kPut || op.code == pcodes::kSignal);
  };
  for (size_t i = 0; i < ops.size();) {
    size_t j = i;
    while (j < ops.size() && movable(ops[j])) ++j;
    std::stable_partition(ops.begin() + i, ops.begin() + j,
                          [](const jax_mscclpp::PlanOp& op) { return op.code == pcodes::kPut; });
    i = j == i ? i + 1 : j;
  }
  // Plain copies, local or into a peer's scratch through a memory channel: one copy step (executor.h, "Groups").
  auto copies_together = [&](const jax_mscclpp::PlanOp& op) {
    return op.code == pcodes::kCopy || (op.code == pcodes::kPut && on_memory(op));
  };
  auto same_source = [&](const jax_mscclpp::PlanOp& a, const jax_mscclpp::PlanOp& b) {
    const PlanRef &x = tb.refs[a.ref + 1], &y = tb.refs[b.ref + 1];
    return x.buffer == y.buffer && x.index == y.index;
  };
  for (size_t i = 0; i < ops.size();) {
    const jax_mscclpp::PlanOp& a = ops[i];
    size_t j = i + 1;
    if (a.code == pcodes::kSignal && on_memory(a)) {
      while (j < ops.size() && ops[j].code == pcodes::kSignal && on_memory(ops[j])) ++j;
    } else if (a.code == pcodes::kWait) {
      std::set<int32_t> channels{a.channel};  // one waiter per semaphore
      while (j < ops.size() && ops[j].code == pcodes::kWait && channels.insert(ops[j].channel).second) ++j;
    } else if (a.code == pcodes::kPutPackets || a.code == pcodes::kReadPackets) {
      while (j < ops.size() && ops[j].code == a.code && ops[j].count == a.count) ++j;
    } else if (copies_together(a)) {
      while (j < ops.size() && copies_together(ops[j])) ++j;
    }
    ops[i].group = static_cast<int16_t>(j - i);
    bool shared = a.code == pcodes::kPutPackets;
    for (size_t k = i + 1; k < j; ++k) shared = shared && same_source(a, ops[k]);
    ops[i].shared_source = shared ? 1 : 0;
    for (size_t k = i + 1; k < j; ++k) ops[k].group = 0;
    i = j;
  }
  tb.ops = std::move(ops);
}

}  // namespace

std::vector<std::vector<int>> plan_channel_indices(const HostPlan& plan) {
  const int n = plan.world_size;
  std::vector<std::vector<int>> index(n);
  for (int r = 0; r < n; ++r) {
    const auto& chans = plan.ranks[r].channels;
    index[r].assign(chans.size(), -1);
    for (size_t c = 0; c < chans.size(); ++c) {
      const PlanChannel& ch = chans[c];
      if (ch.type == PlanChannelType::kSwitch) continue;
      const int p = ch.peer, q = ch.peer_channel;
      const std::string where = "rank " + std::to_string(r) + " channel " + std::to_string(c);
      if (p < 0 || p >= n || q < 0 || q >= static_cast<int>(plan.ranks[p].channels.size()))
        throw std::invalid_argument(where + ": peer endpoint out of range");
      const PlanChannel& other = plan.ranks[p].channels[q];
      if (other.type != ch.type || other.peer != r || other.peer_channel != static_cast<int>(c))
        throw std::invalid_argument(where + ": the peer endpoint does not name it back");
      if (p == r) continue;  // a self channel: semaphores of its own
      const int lo = std::min(r, p), hi = std::max(r, p);
      const int lo_index = r < p ? static_cast<int>(c) : q;
      int k = 0;
      const auto& lo_chans = plan.ranks[lo].channels;
      for (int i = 0; i < lo_index; ++i)
        if (lo_chans[i].type == ch.type && lo_chans[i].peer == hi) ++k;
      index[r][c] = k;
    }
  }
  return index;
}

int ExecutorPlan::channels_per_peer(const HostPlan& plan) {
  int most = 0;
  for (const auto& ranks : plan_channel_indices(plan))
    for (int k : ranks) most = std::max(most, k + 1);
  return std::max(most, 1);
}

bool ExecutorPlan::uses_port_channels(const HostPlan& plan) {
  for (const auto& rank : plan.ranks)
    for (const auto& ch : rank.channels)
      if (ch.type == PlanChannelType::kPort) return true;
  return false;
}

int ExecutorPlan::staging_chunks(const HostPlan& plan) {
  int most = 0;
  for (const auto& rank : plan.ranks) most = std::max(most, staging_of(rank));
  return most;
}

uint64_t ExecutorPlan::scratch_bytes_for(const HostPlan& plan, uint64_t block_count, int32_t dtype) {
  DevicePlan d{};
  d.chunks_per_block = plan.chunks_per_block;
  d.scratch_chunks = scratch_renumbering(plan).back();
  d.staging_chunks = staging_chunks(plan);
  d.packets = plan.packets ? 1 : 0;
  return plan_scratch_bytes_for(d, block_count, dtype);
}

namespace {

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument(what); }

// Step 1: what the context and the executor's launch bounds must give `P` on rank ctx.rank(): the plan's world
// size, `threads` per block (0: kDefaultThreads; a multiple of 32, at most 512) and the channels per peer its
// channel indices need. Returns the threads per block to launch; throws std::invalid_argument naming the plan.
int checked_threads(const HostPlan& P, const RankContext& ctx, int threads) {
  if (P.world_size != ctx.nranks())
    refuse("jax_mscclpp: plan '" + P.name + "' is for " + std::to_string(P.world_size) + " ranks, the context has " +
           std::to_string(ctx.nranks()));
  if (threads <= 0) threads = kDefaultThreads;
  if (threads > 512 || threads % 32 != 0)
    refuse("jax_mscclpp: executor threads per block must be a multiple of 32, at most 512");
  const int cpp = ctx.channels_per_peer();
  const int need = ExecutorPlan::channels_per_peer(P);
  if (need > cpp)
    refuse("jax_mscclpp: plan '" + P.name + "' needs " + std::to_string(need) + " channels per peer, the context has " +
           std::to_string(cpp));
  return threads;
}

// The memory channels from a rank to itself: each gets a pair of semaphore words (inbound, expected) of its own.
struct SelfChannels {
  std::vector<int> slot;                          // [rank channel]: the channel's self slot, -1 for another channel
  int count = 0;                                  // self slots
  std::vector<MemoryChannelDeviceHandle> handles;  // [self slot]
};

// Step 2: the self slots of rank `me`'s channels, numbered in channel order. Throws std::invalid_argument for a port
// channel to itself (the proxy serves peers only).
SelfChannels self_channel_slots(const HostPlan& P, int me) {
  const PlanRank& R = P.ranks[me];
  SelfChannels self;
  self.slot.assign(R.channels.size(), -1);
  for (size_t c = 0; c < R.channels.size(); ++c) {
    const PlanChannel& ch = R.channels[c];
    if (ch.type == PlanChannelType::kSwitch || ch.peer != me) continue;
    if (ch.type == PlanChannelType::kPort)
      refuse("jax_mscclpp: plan '" + P.name + "': rank " + std::to_string(me) + " channel " + std::to_string(c) +
             " is a port channel to itself; the GPU executor supports memory channels only between thread blocks "
             "of one rank");
    self.slot[c] = self.count++;
  }
  return self;
}

// Step 3: the handles of `self`'s channels over `words` (2 per slot: slot s's inbound word, then its expected word;
// a channel signals its peer endpoint's inbound word), on the rank's scratch.
void bind_self_channels(SelfChannels& self, const PlanRank& R, uint64_t* words, const RankContext& ctx, int me) {
  self.handles.assign(self.count, MemoryChannelDeviceHandle{});
  for (size_t c = 0; c < R.channels.size(); ++c) {
    if (self.slot[c] < 0) continue;
    MemoryChannelDeviceHandle& h = self.handles[self.slot[c]];
    h = MemoryChannelDeviceHandle{};
    h.semaphore.inbound = words + 2 * self.slot[c];
    h.semaphore.expected = h.semaphore.inbound + 1;
    h.semaphore.remote_inbound = words + 2 * self.slot[R.channels[c].peer_channel];
    h.semaphore.site = ctx.site(me);
    h.remote = ctx.scratch();
    h.local = ctx.scratch();
    h.packets = ctx.scratch();
  }
}

// The context's channel handles, as its device tables hold them: [peer * channels_per_peer + k]; port empty where
// the context has no port channels.
struct ContextHandles {
  std::vector<MemoryChannelDeviceHandle> mem;
  std::vector<PortChannelDeviceHandle> port;
};

// Step 4: the context's handles, read back once from `device_ctx`'s device tables (the images carry copies).
ContextHandles read_context_handles(const RankContext& ctx, const CollectiveContext& device_ctx) {
  const size_t n_slots = static_cast<size_t>(ctx.nranks()) * ctx.channels_per_peer();
  ContextHandles h;
  h.mem.resize(n_slots);
  h.port.resize(device_ctx.port != nullptr ? n_slots : 0);
  JAX_MSCCLPP_CUDA_CHECK(
      cudaMemcpy(h.mem.data(), device_ctx.mem, n_slots * sizeof(h.mem[0]), cudaMemcpyDeviceToHost));
  if (!h.port.empty())
    JAX_MSCCLPP_CUDA_CHECK(
        cudaMemcpy(h.port.data(), device_ctx.port, n_slots * sizeof(h.port[0]), cudaMemcpyDeviceToHost));
  return h;
}

// Step 5: the program images of rank `me`'s thread blocks (executor.h, PlanImage), one thread block at a time: each
// operation checked for what the executor runs, the rank channels it names bound into the thread block's channel
// table (handles copied in), its references encoded (scratch chunks renumbered), then the block's groups scheduled.
// Throws std::invalid_argument naming the rank, thread block and operation at fault. Counts, over every thread
// block built, the staging chunks of port puts from input/output and the port and switch channels used.
class ImageBuilder {
 public:
  ImageBuilder(const HostPlan& P, int me, int cpp, const SelfChannels& self, const ContextHandles& handles)
      : P_(P), R_(P.ranks[me]), me_(me), cpp_(cpp), self_(self), handles_(handles),
        indices_(plan_channel_indices(P)), renumber_(scratch_renumbering(P)),
        port_used_(R_.channels.size(), 0), switch_used_(R_.channels.size(), 0) {}

  int32_t kept_scratch_chunks() const { return renumber_.back(); }
  int32_t staging_chunks() const { return staging_; }
  int32_t port_channels_used() const {
    return static_cast<int32_t>(std::count(port_used_.begin(), port_used_.end(), 1));
  }
  int32_t switch_channels_used() const {
    return static_cast<int32_t>(std::count(switch_used_.begin(), switch_used_.end(), 1));
  }

  // Thread block t's image; t at or past the plan's thread blocks: an empty one (a plan runs one block at least).
  ThreadBlockImage thread_block(int t) {
    ThreadBlockImage tb;
    std::map<int, int> local;  // rank channel -> thread block channel
    const int n_tbs = static_cast<int>(R_.threadblocks.size());
    const std::vector<PlanOp> empty;
    const std::vector<PlanOp>& list = t < n_tbs ? R_.threadblocks[t] : empty;
    for (size_t i = 0; i < list.size(); ++i) {
      const PlanOp& op = list[i];
      const std::string where = "jax_mscclpp: plan '" + P_.name + "': rank " + std::to_string(me_) +
                                " thread block " + std::to_string(t) + " operation " + std::to_string(i) + " (" +
                                host::plan_op_name(op.code) + "): ";
      check_channels(op, where);
      const int count = check_references(op, where);
      encode(tb, local, op, count);
    }
    schedule_groups(tb);
    return tb;
  }

 private:
  [[noreturn]] static void fail(const std::string& where, const std::string& what) { refuse(where + what); }

  // The executor's kind of rank channel c (plan_codes::ChannelKind); fails for a channel out of range.
  int kind_of(int c, const std::string& where) const {
    if (c < 0 || c >= static_cast<int>(R_.channels.size())) fail(where, "channel out of range");
    const PlanChannel& ch = R_.channels[c];
    if (ch.type == PlanChannelType::kSwitch) return plan_codes::kSwitch;
    if (ch.type == PlanChannelType::kPort) return plan_codes::kPort;
    return ch.peer == me_ ? plan_codes::kSelfMemory : plan_codes::kMemory;
  }
  bool is_memory(int c, const std::string& where) const {
    const int k = kind_of(c, where);
    return k == plan_codes::kMemory || k == plan_codes::kSelfMemory;
  }

  // The channel kinds each operation needs, and the operand counts it may have.
  void check_channels(const PlanOp& op, const std::string& where) const {
    const PlanOpCode code = op.code;
    switch (code) {
      case PlanOpCode::kPut:
      case PlanOpCode::kPutWithSignal:
      case PlanOpCode::kSignal:
      case PlanOpCode::kWait:
      case PlanOpCode::kFlush:
        if (kind_of(op.channel, where) == plan_codes::kSwitch) fail(where, "needs a memory or port channel");
        break;
      case PlanOpCode::kPutPackets:
      case PlanOpCode::kReadPackets:
        if (!is_memory(op.channel, where)) fail(where, "needs a memory channel");
        break;
      case PlanOpCode::kSwitchReduce:
      case PlanOpCode::kSwitchBroadcast:
        if (kind_of(op.channel, where) != plan_codes::kSwitch) fail(where, "needs a switch channel");
        if (R_.channels[op.channel].members.size() > static_cast<size_t>(kPlanMaxOperands))
          fail(where, "more switch members than the executor takes");
        break;
      default: break;
    }
    for (const auto& ref : op.packet_srcs)
      if (!is_memory(ref.channel, where)) fail(where, "a packet source needs a memory channel");
    for (const auto& ref : op.remotes)
      if (!is_memory(ref.channel, where)) fail(where, "a remote destination needs a memory channel");
    if ((code == PlanOpCode::kReduce || code == PlanOpCode::kReducePut || code == PlanOpCode::kReducePackets) &&
        op.srcs.size() + op.packet_srcs.size() < 1)
      fail(where, "a reduction needs sources");
    if (code != PlanOpCode::kReducePackets && !op.packet_srcs.empty()) fail(where, "unexpected packet sources");
    if (code != PlanOpCode::kReducePut && code != PlanOpCode::kReducePackets && !op.remotes.empty())
      fail(where, "unexpected remote destinations");
    if (op.srcs.size() > static_cast<size_t>(kPlanMaxOperands) ||
        op.packet_srcs.size() > static_cast<size_t>(kPlanMaxOperands) ||
        op.srcs.size() + op.packet_srcs.size() > static_cast<size_t>(kPlanMaxOperands) ||
        op.remotes.size() > static_cast<size_t>(kPlanMaxOperands))
      fail(where, "more operands than the executor takes (" + std::to_string(kPlanMaxOperands) + " of each kind)");
  }

  // The references of `op`: each one the operation has present, in a buffer it may use, in range, all of one chunk
  // count. Returns that count (0 for an operation without references).
  int check_references(const PlanOp& op, const std::string& where) const {
    const PlanOpCode code = op.code;
    const bool needs_dst = code != PlanOpCode::kSignal && code != PlanOpCode::kWait && code != PlanOpCode::kFlush &&
                           code != PlanOpCode::kBarrier;
    const bool needs_src = code == PlanOpCode::kCopy || code == PlanOpCode::kPut ||
                           code == PlanOpCode::kPutWithSignal || code == PlanOpCode::kPutPackets ||
                           code == PlanOpCode::kReadPackets || code == PlanOpCode::kSwitchReduce ||
                           code == PlanOpCode::kSwitchBroadcast;
    const bool remote_dst = code == PlanOpCode::kPut || code == PlanOpCode::kPutWithSignal ||
                            code == PlanOpCode::kPutPackets || code == PlanOpCode::kSwitchBroadcast;
    int count = -1;
    auto check = [&](const ChunkRef& c, bool present, bool scratch_only, bool writes, const char* what) {
      if (!present) return;
      if (c.buffer == PlanBuffer::kNone) fail(where, std::string("missing ") + what);
      if (scratch_only && c.buffer != PlanBuffer::kScratch) fail(where, std::string(what) + " must be in scratch");
      if (writes && c.buffer == PlanBuffer::kInput) fail(where, std::string(what) + " writes the input");
      if (c.count < 0 || c.index < 0 || c.index + c.count > chunk_total(P_, c.buffer))
        fail(where, std::string(what) + " is out of range");
      if (count >= 0 && c.count != count) fail(where, "references of different chunk counts");
      count = c.count;
    };
    const bool packet_src = code == PlanOpCode::kReadPackets;
    check(op.dst, needs_dst, remote_dst, true, "dst");
    check(op.src, needs_src, packet_src || code == PlanOpCode::kSwitchReduce, false, "src");
    for (const auto& s : op.srcs) check(s, true, false, false, "source");
    for (const auto& s : op.packet_srcs) check(s.chunk, true, true, false, "packet source");
    for (const auto& s : op.remotes) check(s.chunk, true, true, true, "remote destination");
    return count < 0 ? 0 : count;
  }

  // The thread block channel of rank channel c, added to `tb`'s table (with its handle, or its switch members) the
  // first time the block names it. Throws std::invalid_argument for a port channel where the context has none.
  int bind(ThreadBlockImage& tb, std::map<int, int>& local, int c) {
    auto it = local.find(c);
    if (it != local.end()) return it->second;
    const PlanChannel& ch = R_.channels[c];
    jax_mscclpp::PlanChannel d{};
    const void* handle = nullptr;
    size_t handle_bytes = 0;
    if (ch.type == PlanChannelType::kSwitch) {
      d.kind = plan_codes::kSwitch;
      d.first_member = static_cast<int32_t>(tb.members.size());
      d.n_members = static_cast<int32_t>(ch.members.size());
      tb.members.insert(tb.members.end(), ch.members.begin(), ch.members.end());
      switch_used_[c] = 1;
    } else if (ch.peer == me_) {
      d.kind = plan_codes::kSelfMemory;
      handle = &self_.handles[self_.slot[c]];
      handle_bytes = sizeof(MemoryChannelDeviceHandle);
    } else {
      const size_t slot = static_cast<size_t>(ch.peer) * cpp_ + indices_[me_][c];
      if (ch.type == PlanChannelType::kPort) {
        if (handles_.port.empty())
          refuse("jax_mscclpp: plan '" + P_.name +
                 "' uses port channels; the context has none (create it with port channels)");
        d.kind = plan_codes::kPort;
        handle = &handles_.port[slot];
        handle_bytes = sizeof(PortChannelDeviceHandle);
        port_used_[c] = 1;
      } else {
        d.kind = plan_codes::kMemory;
        handle = &handles_.mem[slot];
        handle_bytes = sizeof(MemoryChannelDeviceHandle);
      }
    }
    if (handle != nullptr) std::memcpy(d.handle, handle, handle_bytes);
    const int id = static_cast<int>(tb.channels.size());
    tb.channels.push_back(d);
    local[c] = id;
    return id;
  }

  // `op` (checked, of `count` chunks per reference) appended to `tb`: its channels bound, its references after the
  // block's earlier ones. A port put from input/output takes the next staging chunks (relative to the staging
  // region: finish_images makes them scratch chunk indices).
  void encode(ThreadBlockImage& tb, std::map<int, int>& local, const PlanOp& op, int count) {
    const PlanOpCode code = op.code;
    auto encode_ref = [&](const ChunkRef& c, int channel) {
      PlanRef ref{static_cast<int16_t>(c.buffer), static_cast<int16_t>(channel), c.index};
      if (c.buffer == PlanBuffer::kScratch) ref.index = renumber_[c.index];
      tb.refs.push_back(ref);
    };
    jax_mscclpp::PlanOp d{};
    d.code = static_cast<uint8_t>(code);
    d.n_srcs = static_cast<uint8_t>(op.srcs.size());
    d.n_packet_srcs = static_cast<uint8_t>(op.packet_srcs.size());
    d.n_remotes = static_cast<uint8_t>(op.remotes.size());
    const bool has_channel = code != PlanOpCode::kCopy && code != PlanOpCode::kReduce &&
                             code != PlanOpCode::kReducePut && code != PlanOpCode::kReducePackets &&
                             code != PlanOpCode::kBarrier;
    d.channel = has_channel ? bind(tb, local, op.channel) : -1;
    d.count = count;
    d.ref = static_cast<int32_t>(tb.refs.size());
    d.staging = -1;
    d.group = 1;
    if (is_port_put(op, R_) && op.src.buffer != PlanBuffer::kScratch) {
      d.staging = staging_;
      staging_ += count;
    }
    encode_ref(op.dst, -1);
    encode_ref(op.src, -1);
    for (const auto& s : op.srcs) encode_ref(s, -1);
    for (const auto& s : op.packet_srcs) encode_ref(s.chunk, bind(tb, local, s.channel));
    for (const auto& s : op.remotes) encode_ref(s.chunk, bind(tb, local, s.channel));
    tb.ops.push_back(d);
  }

  const HostPlan& P_;
  const PlanRank& R_;
  const int me_, cpp_;
  const SelfChannels& self_;
  const ContextHandles& handles_;
  const std::vector<std::vector<int>> indices_;  // plan_channel_indices(P)
  const std::vector<int32_t> renumber_;           // scratch_renumbering(P)
  std::vector<char> port_used_, switch_used_;     // [rank channel]
  int32_t staging_ = 0;
};

// Step 6: the images' staging chunks placed after the `kept` scratch chunks, and the bytes of the largest image,
// which every image gets (the kernel's dynamic shared memory, a multiple of 16). Throws std::invalid_argument above
// kMaxSharedBytes.
uint32_t finish_images(std::vector<ThreadBlockImage>& images, int32_t kept, const HostPlan& P, int me) {
  uint32_t image_bytes = 0;
  for (auto& tb : images) {
    for (auto& op : tb.ops)
      if (op.staging >= 0) op.staging += kept;
    image_bytes = std::max(image_bytes, tb.bytes());
  }
  if (image_bytes > kMaxSharedBytes)
    refuse("jax_mscclpp: plan '" + P.name + "': rank " + std::to_string(me) + " needs " + std::to_string(image_bytes) +
           " bytes of shared memory for a thread block's operations and channels (the executor takes " +
           std::to_string(kMaxSharedBytes) + ")");
  return image_bytes;
}

// Step 7: the images as the kernel reads them: image t at t * image_bytes, each zero-padded.
std::vector<char> image_blob(const std::vector<ThreadBlockImage>& images, uint32_t image_bytes) {
  std::vector<char> blob(images.size() * image_bytes, 0);
  for (size_t t = 0; t < images.size(); ++t) images[t].write(blob.data() + t * image_bytes);
  return blob;
}

}  // namespace

ExecutorPlan::ExecutorPlan(std::shared_ptr<const HostPlan> plan, const RankContext& ctx,
                           const CollectiveContext& device_ctx, int threads)
    : plan_(std::move(plan)) {
  const HostPlan& P = *plan_;
  const int me = ctx.rank();
  threads = checked_threads(P, ctx, threads);
  SelfChannels self = self_channel_slots(P, me);
  self_semaphores_ = DeviceBuffer(ctx.device(), std::max(self.count, 1) * 2 * sizeof(uint64_t));
  bind_self_channels(self, P.ranks[me], self_semaphores_.get<uint64_t>(), ctx, me);
  const ContextHandles handles = read_context_handles(ctx, device_ctx);

  ImageBuilder builder(P, me, ctx.channels_per_peer(), self, handles);
  std::vector<ThreadBlockImage> images;
  for (int t = 0; t < std::max(static_cast<int>(P.ranks[me].threadblocks.size()), 1); ++t)
    images.push_back(builder.thread_block(t));
  const int32_t kept = builder.kept_scratch_chunks();
  const uint32_t image_bytes = finish_images(images, kept, P, me);
  const std::vector<char> blob = image_blob(images, image_bytes);

  device_.rank = me;
  device_.nranks = P.world_size;
  device_.n_threadblocks = static_cast<int32_t>(images.size());
  device_.threads = threads;
  device_.input_blocks = P.input_blocks;
  device_.output_blocks = P.output_blocks;
  device_.chunks_per_block = P.chunks_per_block;
  device_.scratch_chunks = kept;
  device_.staging_chunks = builder.staging_chunks();
  device_.packets = P.packets ? 1 : 0;
  device_.image_bytes = image_bytes;
  device_.port_channels = builder.port_channels_used();
  device_.switch_channels = builder.switch_channels_used();
  device_.collective = static_cast<int32_t>(P.collective);
  device_.fingerprint = plan_fingerprint(P.name.c_str());
  device_.inline_only = std::all_of(images.begin(), images.end(), [](const ThreadBlockImage& tb) {
    return std::all_of(tb.ops.begin(), tb.ops.end(),
                       [](const jax_mscclpp::PlanOp& op) { return plan_op_runs_inline(op.code); });
  });
  images_ = DeviceBuffer(ctx.device(), blob.size());
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpy(images_.get(), blob.data(), blob.size(), cudaMemcpyHostToDevice));
  device_.images = images_.get<const uint4>();
}

}  // namespace jax_mscclpp::cuda
