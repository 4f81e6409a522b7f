// our_runtime.h over RuntimeCommunicator: ids, communicator setup and splits, the calling thread's group queue, the
// call counts.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "dtype_codes.h"
#include "group_depth.h"
#include "jax_mscclpp/codes.h"
#include "jax_mscclpp/settings.h"
#include "last_error.h"
#include "our_runtime.h"
#include "real_nccl.h"
#include "runtime_communicator.h"
#include "unique_id.h"

namespace jax_mscclpp::nccl {
namespace {

// Calls counted per function and algorithm code; the last column counts those forwarded to the real NCCL.
constexpr int kAlgorithmColumns = 32;
constexpr int kNcclColumn = kAlgorithmColumns;
std::array<std::array<std::atomic<uint64_t>, kAlgorithmColumns + 1>, static_cast<int>(ApiFunction::kCount)> counts{};

void count(ApiFunction function, int column) {
  if (column >= 0 && column <= kAlgorithmColumns) {
    counts[static_cast<int>(function)][column].fetch_add(1, std::memory_order_relaxed);
  }
}

const char* algorithm_name(int code) {
  switch (code) {
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name, ...) \
  case code:                                               \
    return name;
#include "jax_mscclpp/codes.def"
    default: return "?";
  }
}

struct Queued {
  RuntimeCommunicator* runtime;
  Operation operation;
  int32_t algorithm;
};

thread_local std::vector<Queued> group_queue;

ncclResult_t launched(cudaError_t error, const Operation& op, const RuntimeCommunicator& runtime) {
  if (error == cudaSuccess) return ncclSuccess;
  if (error == kRefusedAfterFailure)
    return fail(ncclRemoteError, std::string(api_function_name(op.function)) + " on rank " +
                                     std::to_string(runtime.rank()) + ": the communicator failed in an earlier call: " +
                                     runtime.failure() + "; that call's outputs are not valid");
  return fail(error == cudaErrorInvalidValue ? ncclInvalidArgument : ncclUnhandledCudaError,
              std::string(api_function_name(op.function)) + " on rank " + std::to_string(runtime.rank()) + ": " +
                  cudaGetErrorString(error));
}

// The real library's communicator for the ranks of `runtime`, made through our bootstrap (rank 0's real id goes to
// every rank), or null where the real NCCL cannot run. Collective. `config` as the caller gave it.
ncclComm_t make_real_communicator(RuntimeCommunicator& runtime, ncclConfig_t* config) {
  if (runtime.shares_gpu() || open_real_library() != ncclSuccess) {
    clear_last_error();
    return nullptr;
  }
  auto get_id = real<decltype(&ncclGetUniqueId)>(ApiFunction::ncclGetUniqueId);
  auto init = real<decltype(&ncclCommInitRankConfig)>(ApiFunction::ncclCommInitRankConfig);
  ncclUniqueId id{};
  std::string mine(1, '\0');
  if (runtime.rank() == 0 && get_id != nullptr && get_id(&id) == ncclSuccess) {
    mine = std::string(1, '\1') + std::string(id.internal, sizeof(id.internal));
  }
  const auto frames = runtime.bootstrap().all_gather(mine, "ncclCommInitRank (NVIDIA's NCCL beside ours)");
  if (frames[0].size() != 1 + sizeof(id.internal) || init == nullptr) return nullptr;
  std::memcpy(id.internal, frames[0].data() + 1, sizeof(id.internal));
  ncclComm_t real_one = nullptr;
  if (init(&real_one, runtime.nranks(), id, runtime.rank(), config) != ncclSuccess) return nullptr;
  return real_one;
}

ncclResult_t setup_failed(const char* function, const std::exception& error) {
  return fail(ncclSystemError, std::string(function) + ": " + error.what());
}

ncclResult_t launch_now(RuntimeCommunicator& runtime, const Operation& op, int32_t algorithm) {
  count(op.function, algorithm);
  if (op.function == ApiFunction::ncclSend) return launched(runtime.launch_permute(&op, nullptr, algorithm), op, runtime);
  if (op.function == ApiFunction::ncclRecv) return launched(runtime.launch_permute(nullptr, &op, algorithm), op, runtime);
  return launched(runtime.launch(op, algorithm), op, runtime);
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
    return setup_failed("ncclGetUniqueId", error);
  }
}

bool is_our_unique_id(const ncclUniqueId& id) { return decode_unique_id(id).has_value(); }

ncclResult_t init_our_communicator(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                                   ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                         std::to_string(nranks) + " ranks");
  }
  RuntimeCommunicator* runtime = nullptr;
  try {
    runtime = new RuntimeCommunicator(*decode_unique_id(id), rank, nranks);
    ncclComm_t real_one = make_real_communicator(*runtime, config);
    *comm = wrap_runtime_communicator(runtime, real_one);
    if (*comm == nullptr) throw std::bad_alloc();
    clear_last_error();
    return ncclSuccess;
  } catch (const std::exception& error) {
    delete runtime;
    return setup_failed("ncclCommInitRank", error);
  }
}

ncclResult_t split_our_communicator(OurCommunicator* parent, int color, int key, ncclComm_t* newcomm,
                                    ncclConfig_t* config) {
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
    return setup_failed("ncclCommSplit", error);
  }
}

bool submit(ncclComm_t comm, const Operation& operation, ncclResult_t* result) {
  OurCommunicator* ours = our_communicator(comm);
  if (ours == nullptr || ours->runtime == nullptr) return false;
  RuntimeCommunicator& runtime = *ours->runtime;
  const int32_t algorithm = runtime.algorithm_for(operation, ours->real != nullptr);
  if (algorithm < 0) {
    if (ours->real != nullptr) {
      count(operation.function, kNcclColumn);
      return false;
    }
    *result = fail(ncclInvalidUsage,
                   std::string(api_function_name(operation.function)) + " (dtype " +
                       std::to_string(operation.dtype) + ", op " + std::to_string(operation.op) +
                       ") is not run by jax_mscclpp's runtime, and NVIDIA's NCCL cannot run on this communicator " +
                       (runtime.shares_gpu() ? "(its ranks share a GPU)" : "(no real NCCL library opened)"));
    return true;
  }
  if (group_depth() > 0) {
    group_queue.push_back({&runtime, operation, algorithm});
    *result = ncclSuccess;
    return true;
  }
  *result = launch_now(runtime, operation, algorithm);
  return true;
}

ncclResult_t end_group() {
  std::vector<Queued> queue;
  queue.swap(group_queue);
  ncclResult_t first_failure = ncclSuccess;
  auto note = [&](ncclResult_t r) {
    if (first_failure == ncclSuccess) first_failure = r;
  };
  // Collectives in order; each communicator's point-to-point calls as one permutation, after them.
  std::vector<RuntimeCommunicator*> p2p_order;
  for (const Queued& q : queue) {
    const bool p2p = q.operation.function == ApiFunction::ncclSend || q.operation.function == ApiFunction::ncclRecv;
    if (!p2p) {
      note(launch_now(*q.runtime, q.operation, q.algorithm));
    } else if (std::find(p2p_order.begin(), p2p_order.end(), q.runtime) == p2p_order.end()) {
      p2p_order.push_back(q.runtime);
    }
  }
  for (RuntimeCommunicator* runtime : p2p_order) {
    const Operation* send = nullptr;
    const Operation* recv = nullptr;
    int32_t algorithm = -1;
    int sends = 0, recvs = 0;
    for (const Queued& q : queue) {
      if (q.runtime != runtime) continue;
      if (q.operation.function == ApiFunction::ncclSend) send = &q.operation, ++sends;
      if (q.operation.function == ApiFunction::ncclRecv) recv = &q.operation, ++recvs;
      algorithm = std::max(algorithm, q.algorithm);
    }
    if (sends > 1 || recvs > 1) {
      note(fail(ncclInvalidUsage, "a group sends " + std::to_string(sends) + " and receives " +
                                      std::to_string(recvs) + " times on one communicator of rank " +
                                      std::to_string(runtime->rank()) +
                                      "; jax_mscclpp's runtime runs at most one of each per group"));
      continue;
    }
    if (send != nullptr && recv != nullptr &&
        send->count * nccl_dtype_bytes(send->dtype) != recv->count * nccl_dtype_bytes(recv->dtype)) {
      note(fail(ncclInvalidUsage, "a group's send and receive differ in size on rank " +
                                      std::to_string(runtime->rank())));
      continue;
    }
    const Operation& any = send != nullptr ? *send : *recv;
    if (send != nullptr) count(ApiFunction::ncclSend, algorithm);
    if (recv != nullptr) count(ApiFunction::ncclRecv, algorithm);
    note(launched(runtime->launch_permute(send, recv, algorithm), any, *runtime));
  }
  if (first_failure == ncclSuccess) clear_last_error();
  return first_failure;
}

void release_runtime(OurCommunicator* ours, bool orderly) {
  if (ours->runtime == nullptr) return;
  if (orderly) {
    try {
      ours->runtime->bootstrap().all_gather("", "ncclCommDestroy");
    } catch (const std::exception&) {
      // A rank gone already: free ours anyway.
    }
  }
  delete ours->runtime;
  ours->runtime = nullptr;
}

int runtime_rank(const OurCommunicator* ours) { return ours->runtime->rank(); }
int runtime_nranks(const OurCommunicator* ours) { return ours->runtime->nranks(); }
bool runtime_failed(const OurCommunicator* ours) { return !ours->runtime->failure().empty(); }
int runtime_device(const OurCommunicator* ours) { return ours->runtime->device(); }

std::string call_counts() {
  std::string text;
  for (int f = 0; f < static_cast<int>(ApiFunction::kCount); ++f) {
    for (int c = 0; c <= kAlgorithmColumns; ++c) {
      const uint64_t n = counts[f][c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      text += std::string(api_function_name(static_cast<ApiFunction>(f))) + " " +
              (c == kNcclColumn ? "nccl" : algorithm_name(c)) + " " + std::to_string(n) + "\n";
    }
  }
  return text;
}

}  // namespace jax_mscclpp::nccl
