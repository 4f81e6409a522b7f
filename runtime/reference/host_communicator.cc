#include "host_communicator.h"

#include "host_executor.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace jax_mscclpp::host {

HostCommunicator::HostCommunicator(int64_t id, int world_size, std::vector<int> group_of_partition,
                                   std::vector<int> rank_of_partition, size_t scratch_half_bytes)
    : id_(id),
      world_(world_size),
      scratch_half_bytes_(scratch_half_bytes),
      group_of_partition_(std::move(group_of_partition)),
      rank_of_partition_(std::move(rank_of_partition)) {
  if (world_ < 1) throw std::invalid_argument("world size must be at least 1");
  if (group_of_partition_.size() != rank_of_partition_.size())
    throw std::invalid_argument("group and rank tables differ in length");
  if (scratch_half_bytes_ < size_t(64) * world_)
    throw std::invalid_argument("scratch too small for this world size");
  if (scratch_half_bytes_ > std::numeric_limits<size_t>::max() / 2)
    throw std::invalid_argument("scratch too large: its two halves do not fit in memory");
  int num_groups = 0;
  for (int g : group_of_partition_) num_groups = std::max(num_groups, g + 1);
  std::vector<int> members(num_groups, 0);
  for (size_t p = 0; p < group_of_partition_.size(); ++p) {
    int g = group_of_partition_[p], r = rank_of_partition_[p];
    if (g < 0 || r < 0 || r >= world_) throw std::invalid_argument("partition table out of range");
    ++members[g];
  }
  for (int m : members)
    if (m != world_) throw std::invalid_argument("every group must hold exactly world_size partitions");

  for (int g = 0; g < num_groups; ++g) {
    auto group = std::make_unique<HostGroup>();
    group->ranks.resize(world_);
    for (int r = 0; r < world_; ++r) {
      HostRankState& s = group->ranks[r];
      s.rank = r;
      s.scratch.reset(new std::byte[2 * scratch_half_bytes_]);  // left uninitialised: never read before written
      s.inbound = std::make_unique<HostSemaphore[]>(world_);
      s.doorbell = std::make_unique<Doorbell>();
      s.expected.assign(world_, 0);
      s.published = std::make_unique<PublishedCalls>();
      s.in_call = std::make_unique<std::atomic<bool>>(false);
#if JAX_MSCCLPP_TESTING
      s.faults = std::make_unique<InjectedFaults>();
#endif
    }
    // Channels reference the peers' registered scratch and semaphores, which never move after this point.
    for (int r = 0; r < world_; ++r) {
      HostRankState& s = group->ranks[r];
      s.channels.resize(world_);
      for (int peer = 0; peer < world_; ++peer) {
        if (peer == r) continue;
        HostRankState& p = group->ranks[peer];
        s.channels[peer] =
            HostMemoryChannel{p.scratch.get(), &p.inbound[r], &s.inbound[peer], &s.expected[peer], p.doorbell.get()};
      }
    }
    groups_.push_back(std::move(group));
  }
}

HostGroup* HostCommunicator::group_of(int partition) {
  if (partition < 0 || partition >= num_partitions()) return nullptr;
  return groups_[group_of_partition_[partition]].get();
}

int HostCommunicator::group_index(int partition) const {
  return partition < 0 || partition >= num_partitions() ? -1 : group_of_partition_[partition];
}

int HostCommunicator::rank_index(int partition) const {
  return partition < 0 || partition >= num_partitions() ? -1 : rank_of_partition_[partition];
}

void HostCommunicator::add_plan(int64_t plan_id, std::shared_ptr<HostPlanInstance> plan) {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  // Made before the plan is findable, so before any call of it; never replaced, so calls of other packet plans
  // that run meanwhile keep their pointers.
  if (plan->plan->packets)
    for (auto& group : groups_)
      for (auto& rank : group->ranks)
        if (!rank.packet_scratch) rank.packet_scratch.reset(new std::byte[2 * scratch_half_bytes_]());
  plans_[plan_id] = std::move(plan);
}

std::shared_ptr<HostPlanInstance> HostCommunicator::find_plan(int64_t plan_id) {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  auto it = plans_.find(plan_id);
  return it == plans_.end() ? nullptr : it->second;
}

RankCallGuard::RankCallGuard(int64_t comm_id, HostGroup& group, HostRankState& me, const CallSignature& call)
    : me_(me) {
  bool idle = false;
  admitted_ = me.in_call->compare_exchange_strong(idle, true, std::memory_order_acq_rel);
  if (admitted_) return;
  CallSignature running;
  me.published->latest(&running);
  failure_.kind = FailureKind::kOutOfStep;
  failure_.message = "jax_mscclpp: two collective calls of rank " + std::to_string(me.rank) + " on communicator " +
           std::to_string(comm_id) + " ran at the same time (" + describe(call) + ", while " + describe(running) +
           " was in flight). XLA's CPU runtime runs independent operations of a program concurrently, so "
           "independent jax_mscclpp collectives in one program can overlap or run in different orders on "
           "different devices; the host backend needs them one at a time in the same order everywhere: make each "
           "depend on the previous one, or combine them into one call (docs/reliability.md)";
  group.mark_broken(failure_);
}

RankCallGuard::~RankCallGuard() {
  if (admitted_) me_.in_call->store(false, std::memory_order_release);
}

std::string HostCommunicator::describe(const CallSignature& s) {
  if (s.algorithm != Algorithm::kPlan) return host::describe(s);
  auto plan = find_plan(s.plan_id);
  return host::describe(s, plan ? plan->plan->name : std::string());
}

HostRankState* HostCommunicator::rank_state(int partition) {
  HostGroup* g = group_of(partition);
  return g ? &g->ranks[rank_of_partition_[partition]] : nullptr;
}

}  // namespace jax_mscclpp::host
