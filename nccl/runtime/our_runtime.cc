// our_runtime.h over communicator_setup.h and RuntimeCommunicator: ids, inits (on the calling thread, on a thread
// of their own for a non-blocking config, or at the outermost ncclGroupEnd for inits inside a group), splits and
// shrinks, the ending of communicators and the queries (operations.cc: the operations and the group queue).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "communicator_setup.h"
#include "group_depth.h"
#include "jax_mscclpp/settings.h"
#include "last_error.h"
#include "mailbox.h"
#include "our_runtime.h"
#include "real_nccl.h"
#include "runtime_communicator.h"
#include "runtime_settings.h"
#include "timeout_policy.h"
#include "unique_id.h"

namespace jax_mscclpp::nccl {

// A setup running on another thread than its init's caller, and who frees what: the setup thread and the owner
// (the caller's ncclCommDestroy / ncclCommAbort / the outermost ncclGroupEnd) each store their mark into `handoff`;
// the second to come frees this record (and, when the owner let go first, the setup frees all it made).
struct PendingSetup {
  SetupRequest request;
  bool nonblocking = false;
  SetupInterrupt interrupt;
  std::atomic<int> handoff{0};
};

namespace {

constexpr int kSetupEnded = 1;
constexpr int kOwnerGone = 2;
// How long ncclCommDestroy, once its own launched work ended, waits for the other ranks to destroy theirs before it
// frees anyway.
constexpr double kDestroyBarrierSeconds = 2.0;

// The inits of the calling thread's group, set up at its outermost ncclGroupEnd.
thread_local std::vector<OurCommunicator*> group_setups;

SetupRequest request_for(const BootstrapAddress& root, int rank, int nranks, const ncclConfig_t* config) {
  SetupRequest request;
  request.root = root;
  request.rank = rank;
  request.nranks = nranks;
  int device = -1;
  const cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    request.device = device;
  } else {
    request.device_error = std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
    (void)cudaGetLastError();
  }
  if (config != nullptr) {
    // NCCL reads a config at the call: the copy is what a setup on another thread reads, `size` bytes of it.
    request.has_config = true;
    const size_t bytes = std::min(config->size, sizeof(ncclConfig_t));
    std::memcpy(&request.config, config, bytes);
    request.config.size = bytes;
  }
  return request;
}

bool nonblocking(const ncclConfig_t* config) {
  return config != nullptr && config->size >= offsetof(ncclConfig_t, blocking) + sizeof(int) && config->blocking == 0;
}

// Frees our runtime's communicator. Where its kernels may still run (an abort, a destroy whose peers did not all
// come), they are stopped from the host first (RuntimeCommunicator::stop_kernels: every wait gives up at its next
// check) and the frees, which wait for the device, go to a thread of their own: the caller returns at once.
void free_runtime(RuntimeCommunicator* runtime, bool kernels_may_run) {
  if (!kernels_may_run) {
    delete runtime;
    return;
  }
  runtime->stop_kernels();
  runtime->bootstrap().interrupt();  // the other ranks' rounds with this one fail at once
  try {
    std::thread([runtime] {
      (void)cudaSetDevice(runtime->device());
      delete runtime;
    }).detach();
  } catch (const std::system_error&) {
    delete runtime;  // no thread to be had: free here
  }
}

// Frees what a setup made for an owner that let go of it (ncclCommAbort of a communicator still initialising).
void free_abandoned(const SetupResult& made) {
  if (made.real != nullptr) {
    if (auto abort = real_if_present<decltype(&ncclCommAbort)>(ApiFunction::ncclCommAbort)) abort(made.real);
  }
  if (made.runtime != nullptr) free_runtime(made.runtime, /*kernels_may_run=*/false);
}

// The setup's outcome into `ours`, then its state (release: what the owner reads after the state). On the thread
// that ran it, so that this thread's last error holds the text.
void publish(OurCommunicator* ours, const SetupResult& made) {
  ours->real = made.real;
  ours->runtime = made.runtime;
  ours->backend = made.backend;
  if (made.code != ncclSuccess) {
    fail(made.code, made.error);
    ours->setup_error = last_error();
  }
  ours->setup.store(made.code, std::memory_order_release);
}

void run_pending(OurCommunicator* ours) {
  PendingSetup* pending = ours->pending;
  const SetupResult made = set_up_communicator(pending->request, &pending->interrupt);
  if (pending->handoff.exchange(kSetupEnded, std::memory_order_acq_rel) == kOwnerGone) {
    free_abandoned(made);
    delete pending;
    release_our_communicator(ours);
    return;
  }
  publish(ours, made);
}

ncclResult_t start_pending(OurCommunicator* ours) {
  try {
    std::thread(run_pending, ours).detach();
    return ncclInProgress;
  } catch (const std::system_error& error) {
    SetupResult made;
    made.code = ncclSystemError;
    made.error = std::string("ncclCommInitRank: cannot start the setup's thread: ") + error.what();
    ours->pending->handoff.store(kSetupEnded);
    publish(ours, made);
    return ncclSystemError;
  }
}

// run(i) for every i < communicators.size(), as a group's end makes what was queued in it: concurrently across
// communicators (one thread may queue the work of several ranks, which meet each other in their bootstrap rounds),
// in queue order within one (its rounds follow one another on its one bootstrap connection). Where no thread can
// be had, here.
void run_by_communicator(const std::vector<const OurCommunicator*>& communicators,
                         const std::function<void(size_t)>& run) {
  std::map<const OurCommunicator*, std::vector<size_t>> by_communicator;
  for (size_t i = 0; i < communicators.size(); ++i) by_communicator[communicators[i]].push_back(i);
  std::vector<std::thread> threads;
  for (const auto& [communicator, indices] : by_communicator) {
    const auto in_order = [&run, mine = indices] {
      for (size_t i : mine) run(i);
    };
    try {
      threads.emplace_back(in_order);
    } catch (const std::system_error&) {
      in_order();
    }
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace

bool our_runtime_enabled() {
  const char* value = setting_value(Setting::kNcclRuntime);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

ncclResult_t make_our_unique_id(ncclUniqueId* id) {
  try {
    *id = encode_unique_id(start_bootstrap_root());
    clear_last_error();
    return ncclSuccess;
  } catch (const std::exception& error) {
    return fail(ncclSystemError, std::string("ncclGetUniqueId: ") + error.what());
  }
}

bool is_our_unique_id(const ncclUniqueId& id) { return decode_unique_id(id).has_value(); }

ncclResult_t init_our_communicator(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                                   ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                         std::to_string(nranks) + " ranks");
  }
  const SetupRequest request = request_for(*decode_unique_id(id), rank, nranks, config);
  if (group_depth() > 0 || nonblocking(config)) {
    ncclComm_t handle = wrap_runtime_communicator(nullptr, nullptr);
    if (handle == nullptr) return fail(ncclSystemError, "ncclCommInitRank: out of host memory");
    OurCommunicator* ours = our_communicator(handle);
    ours->pending = new PendingSetup{request, nonblocking(config)};
    ours->setup.store(ncclInProgress, std::memory_order_release);
    *comm = handle;
    clear_last_error();
    if (group_depth() > 0) {
      group_setups.push_back(ours);
      return ncclSuccess;
    }
    return start_pending(ours);
  }
  const SetupResult made = set_up_communicator(request, nullptr);
  if (made.code != ncclSuccess) return fail(made.code, made.error);
  *comm = wrap_runtime_communicator(made.runtime, made.real);
  if (*comm == nullptr) {
    free_abandoned(made);
    return fail(ncclSystemError, "ncclCommInitRank: out of host memory");
  }
  our_communicator(*comm)->backend = made.backend;
  clear_last_error();
  return ncclSuccess;
}

ncclResult_t run_group_setups() {
  std::vector<OurCommunicator*> setups;
  setups.swap(group_setups);
  if (setups.empty()) return ncclSuccess;
  const bool any_nonblocking =
      std::any_of(setups.begin(), setups.end(), [](OurCommunicator* o) { return o->pending->nonblocking; });
  if (any_nonblocking) {
    // NCCL's rule: a group with a non-blocking communicator returns ncclInProgress; each setup reports through
    // its communicator's ncclCommGetAsyncError.
    ncclResult_t result = ncclInProgress;
    for (OurCommunicator* ours : setups)
      if (start_pending(ours) != ncclInProgress) result = ncclSystemError;
    return result;
  }
  // Concurrently: one thread may init several ranks of one communicator, which meet each other in every round.
  std::vector<SetupResult> made(setups.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < setups.size(); ++i) {
    try {
      threads.emplace_back([&made, &setups, i] { made[i] = set_up_communicator(setups[i]->pending->request, nullptr); });
    } catch (const std::system_error& error) {
      made[i].code = ncclSystemError;
      made[i].error = std::string("ncclCommInitRank: cannot start the setup's thread: ") + error.what();
    }
  }
  for (std::thread& t : threads) t.join();
  ncclResult_t first = ncclSuccess;
  std::string first_error;
  for (size_t i = 0; i < setups.size(); ++i) {
    publish(setups[i], made[i]);
    delete setups[i]->pending;
    setups[i]->pending = nullptr;
    if (first == ncclSuccess && made[i].code != ncclSuccess) first = made[i].code, first_error = made[i].error;
  }
  if (first != ncclSuccess) return fail(first, first_error);
  clear_last_error();
  return ncclSuccess;
}

void discard_group_setups() {
  std::vector<OurCommunicator*> setups;
  setups.swap(group_setups);
  for (OurCommunicator* ours : setups) {
    SetupResult never;
    never.code = ncclInvalidUsage;
    never.error = "ncclCommInitRank: its group ended in ncclGroupSimulateEnd, which makes nothing";
    publish(ours, never);
    delete ours->pending;
    ours->pending = nullptr;
  }
}

bool release_pending_setup(OurCommunicator* ours) {
  PendingSetup* pending = ours->pending;
  if (pending == nullptr) return false;
  const auto queued = std::find(group_setups.begin(), group_setups.end(), ours);
  if (queued != group_setups.end()) {
    // Queued for a group that has not ended: it never started, and never will.
    group_setups.erase(queued);
  } else if (pending->handoff.exchange(kOwnerGone, std::memory_order_acq_rel) == 0) {
    // Still running: interrupted, and it frees everything it makes when it ends.
    pending->interrupt.interrupt();
    return true;
  } else {
    // It ended: its outcome is published (or about to be, a few instructions away).
    while (setup_state(ours) == ncclInProgress) std::this_thread::yield();
  }
  delete pending;
  ours->pending = nullptr;
  return false;
}

namespace {

// A split or shrink called inside a group: made at the outermost ncclGroupEnd (run_group_children). `make` runs it
// as outside a group.
struct PendingChild {
  OurCommunicator* parent;
  int device;  // the caller's current device at the call
  std::function<ncclResult_t()> make;
};
thread_local std::vector<PendingChild> group_children;

// `make` queued for the group's end: *newcomm is null until then. NCCL reads a config at the call: the copy is
// what the group's end passes on.
ncclResult_t queue_child(OurCommunicator* parent, ncclComm_t* newcomm, const ncclConfig_t* config,
                         std::function<ncclResult_t(ncclConfig_t*)> make) {
  std::shared_ptr<ncclConfig_t> copy;
  if (config != nullptr) {
    copy = std::make_shared<ncclConfig_t>();
    std::memcpy(copy.get(), config, std::min(config->size, sizeof(ncclConfig_t)));
  }
  int device = 0;
  (void)cudaGetDevice(&device);
  *newcomm = nullptr;
  group_children.push_back({parent, device, [copy, make] { return make(copy.get()); }});
  clear_last_error();
  return ncclSuccess;
}

}  // namespace

ncclResult_t run_group_children() {
  std::vector<PendingChild> pending;
  pending.swap(group_children);
  if (pending.empty()) return ncclSuccess;
  std::vector<const OurCommunicator*> parents;
  for (const PendingChild& child : pending) parents.push_back(child.parent);
  std::vector<ncclResult_t> results(pending.size(), ncclSuccess);
  std::vector<std::string> errors(pending.size());
  run_by_communicator(parents, [&pending, &results, &errors](size_t i) {
    (void)cudaSetDevice(pending[i].device);
    results[i] = pending[i].make();
    if (results[i] != ncclSuccess && results[i] != ncclInProgress) errors[i] = last_error();
  });
  ncclResult_t result = ncclSuccess;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (results[i] == ncclSuccess || results[i] == ncclInProgress) {
      if (result == ncclSuccess) result = results[i];
      continue;
    }
    return fail(results[i], errors[i]);
  }
  clear_last_error();
  return result;
}

void discard_group_children() { group_children.clear(); }

ncclResult_t split_our_communicator(OurCommunicator* parent, int color, int key, ncclComm_t* newcomm,
                                    ncclConfig_t* config) {
  if (group_depth() > 0)
    return queue_child(parent, newcomm, config, [parent, color, key, newcomm](ncclConfig_t* copy) {
      return split_our_communicator(parent, color, key, newcomm, copy);
    });
  RuntimeCommunicator& from = *parent->runtime;
  try {
    // Round 1: every rank's color and key. The first rank (by key, then rank) of each color starts the child's
    // root; round 2 carries its id to the others.
    struct Entry { int32_t color, key; };
    const Entry mine{color, key};
    const auto entries = from.bootstrap().all_gather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)),
                                                     "ncclCommSplit");
    std::vector<std::pair<int32_t, int>> members;  // (key, parent rank) of this color
    for (int q = 0; q < from.nranks(); ++q) {
      Entry e{};
      std::memcpy(&e, entries[q].data(), sizeof(e));
      if (color != NCCL_SPLIT_NOCOLOR && e.color == color) members.emplace_back(e.key, q);
    }
    std::sort(members.begin(), members.end());
    const bool leader = !members.empty() && members.front().second == from.rank();
    std::string id_frame;
    if (leader) {
      const ncclUniqueId id = encode_unique_id(start_bootstrap_root());
      id_frame.assign(id.internal, sizeof(id.internal));
    }
    const auto ids = from.bootstrap().all_gather(id_frame, "ncclCommSplit");
    if (color == NCCL_SPLIT_NOCOLOR) {
      *newcomm = nullptr;
      clear_last_error();
      return ncclSuccess;
    }
    int new_rank = 0;
    while (members[new_rank].second != from.rank()) ++new_rank;
    ncclUniqueId id{};
    std::memcpy(id.internal, ids[members.front().second].data(), sizeof(id.internal));
    return init_our_communicator(newcomm, static_cast<int>(members.size()), id, new_rank, config);
  } catch (const std::exception& error) {
    return fail(ncclSystemError, std::string("ncclCommSplit: ") + error.what());
  }
}

ncclResult_t shrink_our_communicator(OurCommunicator* parent, const int* exclude, int count, ncclComm_t* newcomm,
                                     ncclConfig_t* config, int flags) {
  RuntimeCommunicator& from = *parent->runtime;
  const int nranks = from.nranks(), rank = from.rank();
  if (count < 0 || (count > 0 && exclude == nullptr))
    return fail(ncclInvalidArgument, "ncclCommShrink: excludeRanksList is NULL or excludeRanksCount negative");
  std::vector<bool> excluded(nranks, false);
  for (int i = 0; i < count; ++i) {
    if (exclude[i] < 0 || exclude[i] >= nranks)
      return fail(ncclInvalidArgument, "ncclCommShrink: rank " + std::to_string(exclude[i]) + " of " +
                                           std::to_string(nranks) + " ranks in excludeRanksList");
    excluded[exclude[i]] = true;
  }
  if (group_depth() > 0) {
    const std::vector<int> excluded_copy(exclude, exclude + count);
    return queue_child(parent, newcomm, config, [parent, excluded_copy, newcomm, flags](ncclConfig_t* copy) {
      return shrink_our_communicator(parent, excluded_copy.data(), static_cast<int>(excluded_copy.size()), newcomm,
                                     copy, flags);
    });
  }
  if (excluded[rank]) {
    // NCCL's excluded ranks do not call; one that does gets no communicator and meets no one.
    *newcomm = nullptr;
    clear_last_error();
    return ncclSuccess;
  }
  std::vector<int> survivors;
  for (int q = 0; q < nranks; ++q)
    if (!excluded[q]) survivors.push_back(q);
  if (flags & NCCL_SHRINK_ABORT) {
    // The parent's operations end first, as an abort ends them: its kernels give up (a peer they wait for may be
    // gone), and the device is past them before the child's kernels share it.
    from.stop_kernels();
    while (!from.kernels_stopped()) std::this_thread::yield();
    (void)from.wait_for_launched_work();
  }
  try {
    // The first survivor starts the child's root and delivers its id to every other survivor's mailbox (mailbox.h):
    // no round of the parent's bootstrap, whose excluded ranks never come.
    const std::string key = "ncclCommShrink " + std::to_string(from.bootstrap().nonce()) + " " +
                            std::to_string(from.next_shrink());
    const int leader = survivors.front();
    ncclUniqueId id{};
    if (rank == leader) {
      id = encode_unique_id(start_bootstrap_root());
      const std::string letter(id.internal, sizeof(id.internal));
      for (int q : survivors) {
        if (q == rank) continue;
        try {
          deliver(from.mailbox_of(q), key, letter, timeout_seconds());
        } catch (const std::exception& error) {
          throw std::runtime_error("rank " + std::to_string(q) + " (not excluded) did not take the new id: " +
                                   error.what());
        }
      }
    } else {
      const std::string letter =
          collect(key, timeout_seconds(), "the new communicator's id from rank " + std::to_string(leader));
      if (letter.size() != sizeof(id.internal)) throw std::runtime_error("rank " + std::to_string(leader) +
                                                                         " sent no id");
      std::memcpy(id.internal, letter.data(), sizeof(id.internal));
    }
    const int new_rank = static_cast<int>(std::find(survivors.begin(), survivors.end(), rank) - survivors.begin());
    return init_our_communicator(newcomm, static_cast<int>(survivors.size()), id, new_rank, config);
  } catch (const std::exception& error) {
    return fail(ncclSystemError, std::string("ncclCommShrink: ") + error.what());
  }
}

void release_runtime(OurCommunicator* ours, bool orderly) {
  RuntimeCommunicator* runtime = ours->runtime;
  if (runtime == nullptr) return;
  ours->runtime = nullptr;
  bool work_ended = false, every_rank_came = false;
  if (orderly) {
    // NCCL's destroy completes the communicator's outstanding operations first: a peer late to a call this rank
    // launched holds the destroy here (as long as the timeout policy waits), and not the barrier's seconds.
    work_ended = runtime->wait_for_launched_work();
    try {
      runtime->bootstrap().all_gather("", "ncclCommDestroy", kDestroyBarrierSeconds);
      every_rank_came = true;
    } catch (const std::exception&) {
      // A rank gone or late: its kernels with this one may never end; freed as by an abort.
    }
  }
  free_runtime(runtime, /*kernels_may_run=*/!(work_ended && every_rank_came));
}

namespace {

// A window registration made inside a group: made at the outermost ncclGroupEnd (run_group_windows).
struct PendingWindow {
  OurCommunicator* ours;
  void* buffer;
  size_t bytes;
  int flags;
  void** window;
};
thread_local std::vector<PendingWindow> group_windows;

// The registration of one window; "" or what failed.
std::string make_window(const PendingWindow& w) {
  try {
    *w.window = w.ours->runtime->register_window(w.buffer, w.bytes, w.flags);
    return "";
  } catch (const std::exception& error) {
    return std::string("ncclCommWindowRegister on rank ") + std::to_string(w.ours->runtime->rank()) + ": " +
           error.what();
  }
}

}  // namespace

ncclResult_t register_window(OurCommunicator* ours, void* buffer, size_t bytes, int flags, void** window) {
  *window = nullptr;
  if (group_depth() > 0) {
    group_windows.push_back({ours, buffer, bytes, flags, window});
    return ncclSuccess;
  }
  if (const std::string failed = make_window({ours, buffer, bytes, flags, window}); !failed.empty())
    return fail(ncclSystemError, failed);
  return ncclSuccess;
}

ncclResult_t run_group_windows() {
  std::vector<PendingWindow> pending;
  pending.swap(group_windows);
  if (pending.empty()) return ncclSuccess;
  // A rank's windows in call order (each registration is collective: its rounds pair up with the peers' same
  // window), the ranks' concurrently.
  std::vector<const OurCommunicator*> communicators;
  for (const PendingWindow& w : pending) communicators.push_back(w.ours);
  std::vector<std::string> failed(pending.size());
  run_by_communicator(communicators, [&failed, &pending](size_t i) { failed[i] = make_window(pending[i]); });
  for (const std::string& f : failed)
    if (!f.empty()) return fail(ncclSystemError, f);
  return ncclSuccess;
}

void discard_group_windows() { group_windows.clear(); }

void deregister_window(OurCommunicator* ours, void* window) {
  ours->runtime->deregister_window(static_cast<Window*>(window));
}

std::string in_place_between_processes(const OurCommunicator* ours, uint64_t* in_place, uint64_t* through_scratch) {
  cuda::GpuRank& rank = ours->runtime->gpu_rank();
  *in_place = rank.in_place_between_processes();
  *through_scratch = rank.through_scratch_between_processes();
  return rank.in_place_between_processes_absence();
}

void register_buffer(OurCommunicator* ours, const void* buffer, size_t bytes) {
  ours->runtime->register_buffer(buffer, bytes);
}

void deregister_buffer(OurCommunicator* ours, const void* buffer, size_t bytes) {
  ours->runtime->deregister_buffer(buffer, bytes);
}

int runtime_rank(const OurCommunicator* ours) { return ours->runtime->rank(); }
int runtime_nranks(const OurCommunicator* ours) { return ours->runtime->nranks(); }
bool runtime_failed(const OurCommunicator* ours) { return !ours->runtime->failure().empty(); }
std::string runtime_failure(const OurCommunicator* ours) { return ours->runtime->failure(); }
void report_late_wait(const OurCommunicator* ours) {
  if (ours == nullptr || ours->runtime == nullptr) return;
  const std::string late = ours->runtime->take_late_report();
  if (!late.empty()) std::fprintf(stderr, "%s\n", late_wait_warning(late).c_str());
}
int runtime_device(const OurCommunicator* ours) { return ours->runtime->device(); }

}  // namespace jax_mscclpp::nccl
