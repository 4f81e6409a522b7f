// HostCommunicator: the reference backend's per-(mesh, axes) setup, made once and reused by every call.
//
// A communicator covers every group of one (mesh, axes) pair: XLA's partition id p of a device maps to its group
// (the devices sharing its coordinates on the other mesh axes) and its rank in that group (row-major over the
// reduced axes), a table the Python side computes. Per (group, rank) it owns registered scratch split in two
// halves chosen by epoch parity, one inbound semaphore per peer, and a channel to every peer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "call_signature.h"
#include "host_channel.h"
#include "host_failure.h"
#include "host_semaphore.h"

namespace jax_mscclpp::host {

struct HostPlanInstance;
struct HostGroup;

// Whether a rank is inside a call: the protocol's epoch and signal counters are the rank's alone, so its calls
// must come one at a time. XLA's CPU runtime runs independent operations of one program concurrently (programs of
// more than 8 operations and buffers over 512 bytes), so two independent collectives of one device can overlap,
// or start in a different order on different devices: the second call to come is refused and the group fails, so
// the calls in flight stop too rather than mix their data (docs/reliability.md, "Independent collectives").
class RankCallGuard {
 public:
  RankCallGuard(int64_t comm_id, HostGroup& group, struct HostRankState& me, const CallSignature& call);
  ~RankCallGuard();
  RankCallGuard(const RankCallGuard&) = delete;
  RankCallGuard& operator=(const RankCallGuard&) = delete;
  bool admitted() const { return admitted_; }
  // Refused: kOutOfStep, naming both calls (the group is failed with it).
  const HostFailure& failure() const { return failure_; }

 private:
  struct HostRankState& me_;
  bool admitted_ = false;
  HostFailure failure_;
};

#if JAX_MSCCLPP_TESTING
// Faults a test injects into one rank (jax_mscclpp/testing/faults.py); set from Python while XLA's threads run.
// The testing build's only (JAX_MSCCLPP_TESTING, root CMakeLists.txt): a shipped module has no such hooks, and the
// calls of its ranks look at none.
struct InjectedFaults {
  std::atomic<int> skip_calls{0};       // the next calls return at once without taking part (a missing peer)
  std::atomic<int> stop_exchanges{-1};  // the next call stops after this many exchanges (a peer lost mid-call)
};
#endif

struct HostRankState {
  int rank = 0;
  std::unique_ptr<std::byte[]> scratch;          // 2 halves of scratch_half_bytes
  // LL packets only (plans whose scratch holds packets), 2 halves, zeroed when made: a packet "arrives" when its
  // flag equals the call's epoch (>= 1), so this memory must never hold anything else, such as data a built-in
  // algorithm or another allocation left whose upper word happens to equal an epoch.
  std::unique_ptr<std::byte[]> packet_scratch;
  std::unique_ptr<HostSemaphore[]> inbound;      // [world]: signals received from each peer
  // Rung by every signal or packet sent to this rank (built-in algorithms and plans) and by the group's failure;
  // the rank's waits sleep on it (host_semaphore.h).
  std::unique_ptr<Doorbell> doorbell;
  std::vector<uint64_t> expected;                // [world]: signals consumed from each peer
  std::vector<HostMemoryChannel> channels;       // [world]: to each peer (the entry for myself is unused)
  uint64_t epoch = 0;                            // rounds completed; round e uses half e & 1
  std::unique_ptr<PublishedCalls> published;     // this rank's calls, for its peers to check (call_signature.h)
  std::unique_ptr<std::atomic<bool>> in_call;    // RankCallGuard
#if JAX_MSCCLPP_TESTING
  std::unique_ptr<InjectedFaults> faults;
#endif
};

// A call that failed on one rank: what the rank reported and how long after the call began.
struct RankFailure {
  int rank = 0;
  double seconds = 0;
  std::string message;
};

struct HostGroup {
  static constexpr size_t kMaxFailures = 256;  // kept per group: the first ones tell what happened

  std::vector<HostRankState> ranks;
  // After a failure (a timeout, mismatched calls) the group's semaphores are out of step: every later call on it
  // fails with the failure at the root (its kind and message), and ranks still waiting in the failed call stop
  // early with it (woken at once).
  std::atomic<bool> broken{false};
  std::mutex reason_mutex;

  // The first failure marked is the root: later ones keep it.
  void mark_broken(const HostFailure& failure) {
    {
      std::lock_guard<std::mutex> lock(reason_mutex);
      if (!root_.failed()) root_ = failure;
      broken.store(true, std::memory_order_release);
    }
    for (HostRankState& r : ranks) r.doorbell->ring(/*urgent=*/true);
  }
  // The failure at the root (kNone while the group is usable).
  HostFailure root() {
    std::lock_guard<std::mutex> lock(reason_mutex);
    return root_;
  }
  // A failure of this rank's call caused by the root: the root's kind, `words` then the root's message.
  HostFailure caused_by_root(const std::string& words) {
    HostFailure r = root();
    r.message = words + r.message;
    return r;
  }
  void record_failure(int rank, double seconds, std::string message) {
    std::lock_guard<std::mutex> lock(reason_mutex);
    if (failures_.size() < kMaxFailures) failures_.push_back({rank, seconds, std::move(message)});
  }
  std::vector<RankFailure> failures() {
    std::lock_guard<std::mutex> lock(reason_mutex);
    return failures_;
  }

 private:
  HostFailure root_;                   // guarded by reason_mutex
  std::vector<RankFailure> failures_;  // guarded by reason_mutex
};

class HostCommunicator {
 public:
  HostCommunicator(int64_t id, int world_size, std::vector<int> group_of_partition,
                   std::vector<int> rank_of_partition, size_t scratch_half_bytes);

  int64_t id() const { return id_; }
  int world_size() const { return world_; }
  size_t scratch_half_bytes() const { return scratch_half_bytes_; }
  int num_partitions() const { return int(group_of_partition_.size()); }
  int num_groups() const { return int(groups_.size()); }

  // nullptr (or -1) when the partition is out of range.
  HostGroup* group_of(int partition);
  HostRankState* rank_state(int partition);
  int group_index(int partition) const;
  int rank_index(int partition) const;
  HostGroup* group_of_index(int group) { return groups_[group].get(); }

  // Execution plans bound to this communicator, by the id Python gave them. Registration may happen while
  // other plans run.
  // Binding a plan whose scratch holds packets first gives every rank its packet scratch.
  void add_plan(int64_t plan_id, std::shared_ptr<HostPlanInstance> plan);
  std::shared_ptr<HostPlanInstance> find_plan(int64_t plan_id);

  // A call signature in words, naming a plan bound here by its name.
  std::string describe(const CallSignature& s);

 private:
  int64_t id_;
  int world_;
  size_t scratch_half_bytes_;
  std::vector<int> group_of_partition_;
  std::vector<int> rank_of_partition_;
  std::vector<std::unique_ptr<HostGroup>> groups_;
  std::mutex plans_mutex_;
  std::map<int64_t, std::shared_ptr<HostPlanInstance>> plans_;
};

}  // namespace jax_mscclpp::host
