#include "host_executor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include "host_reduce.h"
#include "message_text.h"

namespace jax_mscclpp::host {
namespace {

// LL8 packet: 4 data bytes and the call's 4-byte flag, written and read as one 8-byte word.
constexpr size_t kPacketData = 4, kPacketBytes = 8;

size_t packets_for(size_t bytes) { return (bytes + kPacketData - 1) / kPacketData; }

// Scratch bytes (of one half) one call of `plan` needs here for `block_count` elements of `elem_size` bytes per
// block: its scratch chunks, as data or as the LL8 packets carrying it.
size_t scratch_bytes(const HostPlan& plan, size_t block_count, size_t elem_size) {
  const size_t ce = (block_count + plan.chunks_per_block - 1) / plan.chunks_per_block;
  const size_t chunk = plan.packets ? packets_for(ce * elem_size) * kPacketBytes : ce * elem_size;
  return size_t(plan.scratch_chunks) * chunk;
}

}  // namespace

HostPlanInstance::HostPlanInstance(std::shared_ptr<const HostPlan> p, int num_groups) : plan(std::move(p)) {
  endpoints.resize(num_groups);
  for (auto& group : endpoints) {
    group.resize(plan->world_size);
    for (int r = 0; r < plan->world_size; ++r) {
      const size_t n = plan->ranks[r].channels.size();
      group[r].inbound = std::make_unique<HostSemaphore[]>(n);
      group[r].expected.assign(n, 0);
    }
  }
}

namespace {

// One rank's interpretation of one call of a plan.
class PlanRun {
 public:
  PlanRun(HostCommunicator& comm, HostPlanInstance& inst, int64_t plan_id, int group, int rank,
          const CollectiveCall& call, double timeout_s)
      : comm_(comm), inst_(inst), plan_(*inst.plan), group_(group), rank_(rank), call_(call), timeout_s_(timeout_s),
        es_(dtype_size(call.dtype)), signature_(CallSignature::of(call, plan_id)) {
    block_count_ = call.block_count;
    ce_ = (block_count_ + plan_.chunks_per_block - 1) / plan_.chunks_per_block;
    scratch_chunk_bytes_ = plan_.packets ? packets_for(ce_ * es_) * kPacketBytes : ce_ * es_;
    HostGroup* g = comm.group_of_index(group);
    epoch_ = ++g->ranks[rank].epoch;
    flag_ = uint32_t(epoch_);
    half_ = size_t(epoch_ & 1) * comm.scratch_half_bytes();
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    // Before any signal or packet of this call (call_signature.h).
    g->ranks[rank].published->publish(epoch_, signature_);
    checked_.assign(plan_.world_size, 0);
  }

  // Thread blocks take turns; each runs until it finishes or must wait (a semaphore or packets not yet there).
  // When none can run, the rank waits on its doorbell until one can (every signal and packet to it rings it).
  bool run() {
    const auto& tbs = plan_.ranks[rank_].threadblocks;
    std::vector<size_t> pc(tbs.size(), 0);
    auto none_can_run = [&]() -> uint32_t {  // as wait_until's `missing`: any ring may let one run
      for (size_t t = 0; t < tbs.size(); ++t)
        if (pc[t] < tbs[t].size() && ready(tbs[t][pc[t]])) return 0;
      return 1;
    };
    Doorbell& doorbell = *state(rank_).doorbell;
    for (;;) {
      bool progressed = false, finished = true;
      for (size_t t = 0; t < tbs.size(); ++t) {
        while (pc[t] < tbs[t].size() && ready(tbs[t][pc[t]])) {
          if (!check_peers(tbs[t][pc[t]])) return false;
          execute(tbs[t][pc[t]]);
          ++pc[t];
          progressed = true;
        }
        finished &= pc[t] == tbs[t].size();
      }
      if (finished) return true;
      if (progressed) continue;
      switch (wait_until(doorbell, none_can_run, deadline_, [&] { return !still_in_step(); },
                         wait_spin_for(comm_.num_partitions()))) {
        case WaitResult::kArrived: break;
        case WaitResult::kTimedOut: return fail(tbs, pc);
        case WaitResult::kStopped: return false;
      }
    }
  }

  const HostFailure& failure() const { return failure_; }

 private:
  // The first data or signal this call receives from a peer orders the peer's published signature before it:
  // check it then, once per peer.
  bool check_peers(const PlanOp& op) {
    auto check = [&](int c) {
      const int peer = channel(c).peer;
      if (peer < 0 || checked_[peer]) return true;
      checked_[peer] = 1;
      CallSignature theirs;
      const uint64_t e = state(peer).published->read(epoch_, &theirs);
      return (e == epoch_ && theirs == signature_) || mismatch(peer, theirs, e);
    };
    if (op.code == PlanOpCode::kWait || op.code == PlanOpCode::kReadPackets) return check(op.channel);
    if (op.code == PlanOpCode::kReducePackets)
      for (const auto& p : op.packet_srcs)
        if (!check(p.channel)) return false;
    return true;
  }

  // While blocked: false (with the error set) when the call failed on another rank or a peer is in another call
  // at this epoch.
  bool still_in_step() {
    HostGroup* g = comm_.group_of_index(group_);
    if (g->broken.load(std::memory_order_acquire)) {
      failure_ = g->caused_by_root("jax_mscclpp: " + call_text() + " stopped at epoch " + std::to_string(epoch_) +
                                   " because the call failed on another rank: ");
      return false;
    }
    for (int peer = 0; peer < plan_.world_size; ++peer) {
      if (peer == rank_) continue;
      CallSignature theirs;
      const uint64_t e = state(peer).published->read(epoch_, &theirs);
      if (e == epoch_ && !(theirs == signature_)) return mismatch(peer, theirs, e);
    }
    return true;
  }

  // "all_reduce (plan 'name', communicator 3): rank 1 of 4", for messages.
  std::string call_text() const {
    return std::string(collective_name(call_.collective)) + " (plan '" + plan_.name + "', communicator " +
           std::to_string(comm_.id()) + "): rank " + std::to_string(rank_) + " of " +
           std::to_string(plan_.world_size);
  }

  bool mismatch(int peer, const CallSignature& theirs, uint64_t their_epoch) {
    failure_.kind = FailureKind::kOutOfStep;
    failure_.message = mismatch_message(comm_.id(), rank_, plan_.world_size, epoch_, comm_.describe(signature_), peer,
                                        their_epoch, comm_.describe(theirs));
    comm_.group_of_index(group_)->mark_broken(failure_);
    return false;
  }

  HostRankState& state(int rank) { return comm_.group_of_index(group_)->ranks[rank]; }
  HostPlanInstance::Endpoints& endpoints(int rank) { return inst_.endpoints[group_][rank]; }
  const PlanChannel& channel(int c) const { return plan_.ranks[rank_].channels[c]; }

  // Element range [start, stop) of chunk `i` of `buffer` (PLAN.md, "Buffer geometry").
  std::pair<size_t, size_t> span(PlanBuffer buffer, size_t i) const {
    if (buffer == PlanBuffer::kScratch) return {i * ce_, (i + 1) * ce_};
    const size_t b = i / plan_.chunks_per_block, j = i % plan_.chunks_per_block;
    const size_t end = (b + 1) * block_count_, start = std::min(b * block_count_ + j * ce_, end);
    return {start, std::min(start + ce_, end)};
  }
  size_t length(const ChunkRef& ref, size_t t) const {
    auto [a, b] = span(ref.buffer, ref.index + t);
    return b - a;
  }
  // Address of chunk `ref.index + t` of `rank`'s buffer (scratch: this call's half; inputs and outputs are
  // only ever the executing rank's).
  std::byte* address(int rank, const ChunkRef& ref, size_t t) {
    switch (ref.buffer) {
      case PlanBuffer::kInput: return const_cast<std::byte*>(static_cast<const std::byte*>(call_.in)) + span(ref.buffer, ref.index + t).first * es_;
      case PlanBuffer::kOutput: return static_cast<std::byte*>(call_.out) + span(ref.buffer, ref.index + t).first * es_;
      case PlanBuffer::kScratch:  // packets live apart from data (host_communicator.h)
        return (plan_.packets ? state(rank).packet_scratch : state(rank).scratch).get() + half_ +
               (ref.index + t) * scratch_chunk_bytes_;
      case PlanBuffer::kNone: break;
    }
    return nullptr;
  }

  // Every packet of scratch chunk `ref.index + t` of `rank` carries this call's flag.
  bool packets_arrived(int rank, const ChunkRef& ref, size_t t) {
    const auto* words = reinterpret_cast<uint64_t*>(address(rank, ref, t));
    for (size_t k = 0, n = packets_for(ce_ * es_); k < n; ++k)
      if (uint32_t(std::atomic_ref<uint64_t>(const_cast<uint64_t&>(words[k])).load(std::memory_order_acquire) >> 32) != flag_)
        return false;
    return true;
  }
  void write_packets(int rank, const ChunkRef& ref, size_t t, const std::byte* data, size_t bytes) {
    auto* words = reinterpret_cast<uint64_t*>(address(rank, ref, t));
    for (size_t k = 0, n = packets_for(ce_ * es_); k < n; ++k) {
      uint32_t payload = 0;
      if (k * kPacketData < bytes) std::memcpy(&payload, data + k * kPacketData, std::min(kPacketData, bytes - k * kPacketData));
      std::atomic_ref<uint64_t>(words[k]).store((uint64_t(flag_) << 32) | payload, std::memory_order_release);
    }
    if (rank != rank_) state(rank).doorbell->ring();
  }
  void read_packets(const ChunkRef& ref, size_t t, std::byte* out, size_t bytes) {
    const auto* words = reinterpret_cast<uint64_t*>(address(rank_, ref, t));
    for (size_t k = 0; k * kPacketData < bytes; ++k) {
      uint32_t payload = uint32_t(std::atomic_ref<uint64_t>(const_cast<uint64_t&>(words[k])).load(std::memory_order_acquire));
      std::memcpy(out + k * kPacketData, &payload, std::min(kPacketData, bytes - k * kPacketData));
    }
  }

  bool ready(const PlanOp& op) {
    if (op.code == PlanOpCode::kWait) {
      auto& ep = endpoints(rank_);
      return ep.inbound[op.channel].count.load(std::memory_order_acquire) >= ep.expected[op.channel] + 1;
    }
    if (op.code == PlanOpCode::kReadPackets) {
      for (int t = 0; t < op.src.count; ++t)
        if (!packets_arrived(rank_, op.src, t)) return false;
    }
    if (op.code == PlanOpCode::kReducePackets) {
      for (const auto& p : op.packet_srcs)
        for (int t = 0; t < p.chunk.count; ++t)
          if (!packets_arrived(rank_, p.chunk, t)) return false;
    }
    return true;
  }

  void signal(int c) {
    const PlanChannel& ch = channel(c);
    endpoints(ch.peer).inbound[ch.peer_channel].count.fetch_add(1, std::memory_order_release);
    state(ch.peer).doorbell->ring();
  }

  // result <- sources in order (+) ..., over `len` elements (bf16 and f16 in f32, rounded once: fold_sources);
  // then stored wherever `store` says.
  void reduce_into(std::byte* result, const std::vector<const std::byte*>& sources, size_t len) {
    fold_sources(call_.dtype, call_.op, result, len, int(sources.size()), [&](int k) { return sources[k]; });
  }

  void execute(const PlanOp& op) {
    switch (op.code) {
      case PlanOpCode::kBarrier:
      case PlanOpCode::kFlush:  // host puts are synchronous copies: nothing is left in flight
        return;
      case PlanOpCode::kSignal:
        signal(op.channel);
        return;
      case PlanOpCode::kWait:
        ++endpoints(rank_).expected[op.channel];
        return;
      case PlanOpCode::kCopy:
        for (int t = 0; t < op.dst.count; ++t)
          std::memmove(address(rank_, op.dst, t), address(rank_, op.src, t),
                       std::min(length(op.dst, t), length(op.src, t)) * es_);
        return;
      case PlanOpCode::kPut:
      case PlanOpCode::kPutWithSignal: {
        const int peer = channel(op.channel).peer;
        for (int t = 0; t < op.dst.count; ++t)
          std::memcpy(address(peer, op.dst, t), address(rank_, op.src, t),
                      std::min(length(op.dst, t), length(op.src, t)) * es_);
        if (op.code == PlanOpCode::kPutWithSignal) signal(op.channel);
        return;
      }
      case PlanOpCode::kPutPackets: {
        const int peer = channel(op.channel).peer;
        for (int t = 0; t < op.dst.count; ++t)
          write_packets(peer, op.dst, t, address(rank_, op.src, t), std::min(length(op.dst, t), length(op.src, t)) * es_);
        return;
      }
      case PlanOpCode::kReadPackets:
        for (int t = 0; t < op.dst.count; ++t)
          read_packets(op.src, t, address(rank_, op.dst, t), std::min(length(op.dst, t), length(op.src, t)) * es_);
        return;
      case PlanOpCode::kReduce:
      case PlanOpCode::kReducePut:
      case PlanOpCode::kReducePackets:
        execute_reduction(op);
        return;
      case PlanOpCode::kSwitchReduce: {
        const auto& members = channel(op.channel).members;
        for (int t = 0; t < op.dst.count; ++t) {
          size_t len = std::min(length(op.dst, t), length(op.src, t));
          std::vector<const std::byte*> sources;
          for (int m : members) sources.push_back(address(m, op.src, t));
          scratch_value_.resize(len * es_);
          reduce_into(scratch_value_.data(), sources, len);
          std::memcpy(address(rank_, op.dst, t), scratch_value_.data(), len * es_);
        }
        return;
      }
      case PlanOpCode::kSwitchBroadcast: {
        for (int t = 0; t < op.dst.count; ++t) {
          size_t len = std::min(length(op.dst, t), length(op.src, t));
          for (int m : channel(op.channel).members)
            std::memmove(address(m, op.dst, t), address(rank_, op.src, t), len * es_);
        }
        return;
      }
    }
  }

  void execute_reduction(const PlanOp& op) {
    for (int t = 0; t < op.dst.count; ++t) {
      size_t len = length(op.dst, t);
      for (const auto& s : op.srcs) len = std::min(len, length(s, t));
      for (const auto& p : op.packet_srcs) len = std::min(len, length(p.chunk, t));
      for (const auto& r : op.remotes) len = std::min(len, length(r.chunk, t));
      std::vector<const std::byte*> sources;
      for (const auto& s : op.srcs) sources.push_back(address(rank_, s, t));
      unpacked_.resize(op.packet_srcs.size());
      for (size_t k = 0; k < op.packet_srcs.size(); ++k) {
        unpacked_[k].resize(len * es_);
        read_packets(op.packet_srcs[k].chunk, t, unpacked_[k].data(), len * es_);
        sources.push_back(unpacked_[k].data());
      }
      scratch_value_.resize(len * es_);
      reduce_into(scratch_value_.data(), sources, len);
      std::memcpy(address(rank_, op.dst, t), scratch_value_.data(), len * es_);
      for (const auto& r : op.remotes) {
        const int peer = channel(r.channel).peer;
        if (op.code == PlanOpCode::kReducePackets)
          write_packets(peer, r.chunk, t, scratch_value_.data(), len * es_);
        else
          std::memcpy(address(peer, r.chunk, t), scratch_value_.data(), len * es_);
      }
    }
  }

  bool fail(const std::vector<std::vector<PlanOp>>& tbs, const std::vector<size_t>& pc) {
    std::string msg = "jax_mscclpp: timeout after " + seconds_text(timeout_s_) + " s in " + call_text() +
                      " at epoch " + std::to_string(epoch_) +
                      " is blocked:";
    for (size_t t = 0; t < tbs.size(); ++t) {
      if (pc[t] >= tbs[t].size()) continue;
      const PlanOp& op = tbs[t][pc[t]];
      msg += " thread block " + std::to_string(t) + " op " + std::to_string(pc[t]) + " (" + plan_op_name(op.code);
      if (op.code == PlanOpCode::kWait) msg += " for peer " + std::to_string(channel(op.channel).peer);
      msg += ");";
    }
    for (int peer = 0; peer < plan_.world_size; ++peer)
      if (peer != rank_)
        msg += peer_state(peer, *state(peer).published, [&](const CallSignature& c) { return comm_.describe(c); });
    failure_.kind = FailureKind::kTimedOut;
    failure_.message = msg + " (set JAX_MSCCLPP_TIMEOUT_S to change the limit)";
    comm_.group_of_index(group_)->mark_broken(failure_);
    return false;
  }

  HostCommunicator& comm_;
  HostPlanInstance& inst_;
  const HostPlan& plan_;
  int group_, rank_;
  const CollectiveCall& call_;
  double timeout_s_;
  size_t es_, block_count_ = 0, ce_ = 0, scratch_chunk_bytes_ = 0, half_ = 0;
  uint64_t epoch_ = 0;
  uint32_t flag_ = 0;
  CallSignature signature_;
  std::vector<char> checked_;  // [world]: peers whose signature this call has checked
  Clock::time_point deadline_;
  HostFailure failure_;
  std::vector<std::byte> scratch_value_;
  std::vector<std::vector<std::byte>> unpacked_;
};

}  // namespace

HostFailure run_plan(HostCommunicator& comm, HostPlanInstance& instance, int64_t plan_id, int partition,
                     const CollectiveCall& call, double timeout_s) {
  const HostPlan& plan = *instance.plan;
  const int group = comm.group_index(partition), rank = comm.rank_index(partition);
  auto refused = [](std::string message) { return HostFailure{FailureKind::kRefused, std::move(message)}; };
  if (group < 0) return refused("jax_mscclpp: partition " + std::to_string(partition) + " is not in this communicator");
  if (plan.world_size != comm.world_size() || plan.collective != call.collective)
    return refused("jax_mscclpp: plan '" + plan.name + "' does not fit this call (collective or world size)");
  if (scratch_bytes(plan, call.block_count, dtype_size(call.dtype)) > comm.scratch_half_bytes())
    return refused("jax_mscclpp: plan '" + plan.name + "' needs more scratch than the communicator has");
  HostGroup* g = comm.group_of_index(group);
  if (g->broken.load(std::memory_order_acquire))
    return g->caused_by_root("jax_mscclpp: communicator " + std::to_string(comm.id()) +
                             " is unusable after an earlier failure: ");
#if JAX_MSCCLPP_TESTING
  InjectedFaults& faults = *g->ranks[rank].faults;
  if (faults.skip_calls.load(std::memory_order_relaxed) > 0) {  // injected: this rank does not show up
    faults.skip_calls.fetch_sub(1, std::memory_order_relaxed);
    return {};
  }
#endif
  RankCallGuard guard(comm.id(), *g, g->ranks[rank], CallSignature::of(call, plan_id));
  if (!guard.admitted()) return guard.failure();
  // A permutation's rank that is no pair's destination gets zeros; the plan writes nothing there (PLAN.md).
  if (call.collective == Collective::kPermute && call.recv_from < 0)
    std::memset(call.out, 0, call.block_count * dtype_size(call.dtype));
  PlanRun run(comm, instance, plan_id, group, rank, call, timeout_s);
  return run.run() ? HostFailure{} : run.failure();
}

}  // namespace jax_mscclpp::host
