#include "allocation_exchange.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <thread>

#include "check.h"
#include "driver_api.h"

namespace jax_mscclpp::cuda {
namespace {

constexpr uint64_t kOutboxMagic = 0x4A4D414C4C4F4331ull;  // "JMALLOC1"
constexpr uint64_t kMapFailed = 1ull << 63;               // in a reader's mapped word: it could not open that generation
constexpr uint64_t kReachable = 1, kUnreachable = 2;      // a call word's low bits

std::atomic<uint64_t> g_outboxes{0};

// One mapping per allocation of another process, whatever communicator of this process reaches it: CUDA IPC opens
// an allocation once per process.
struct OpenedAllocation {
  void* base = nullptr;
  int device = 0;
  int users = 0;
};
std::mutex g_opened_mutex;
std::map<std::string, OpenedAllocation> g_opened;  // by the IPC handle's bytes

std::string handle_key(const cudaIpcMemHandle_t& h) { return std::string(h.reserved, sizeof(h.reserved)); }

void* open_allocation(const cudaIpcMemHandle_t& h, int device) {
  std::lock_guard<std::mutex> lock(g_opened_mutex);
  OpenedAllocation& a = g_opened[handle_key(h)];
  if (a.users == 0) {
    DeviceGuard g(device);
    void* base = nullptr;
    if (cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      (void)cudaGetLastError();
      g_opened.erase(handle_key(h));
      return nullptr;
    }
    a.base = base;
    a.device = device;
  }
  ++a.users;
  return a.base;
}

void close_allocation(const cudaIpcMemHandle_t& h) {
  std::lock_guard<std::mutex> lock(g_opened_mutex);
  auto it = g_opened.find(handle_key(h));
  if (it == g_opened.end() || --it->second.users > 0) return;
  int previous = 0;
  JAX_MSCCLPP_CUDA_IGNORE(cudaGetDevice(&previous));
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(it->second.device));
  JAX_MSCCLPP_CUDA_IGNORE(cudaIpcCloseMemHandle(it->second.base));
  JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(previous));
  g_opened.erase(it);
}

// Spins, then yields, until `done` or `timeout_s` passed (false).
template <class Done>
bool wait_for(double timeout_s, Done done) {
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0;; ++i) {
    if (done()) return true;
    if (i > 64) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) return false;
      if (i > 4096) std::this_thread::sleep_for(std::chrono::microseconds(20));
      else sched_yield();
    }
  }
}

}  // namespace

struct alignas(64) SharedExport {
  std::atomic<uint64_t> generation;  // 0 while (re)written; set last, with release
  uint64_t base;
  uint64_t bytes;
  cudaIpcMemHandle_t ipc;
  std::atomic<uint64_t> mapped[kDirectPeers];  // by reader: the generation it mapped (| kMapFailed)
  uint64_t address[kDirectPeers];              // by reader: `base` in its process
};

struct AllocationExchange::Outbox {
  uint64_t magic;
  std::atomic<uint64_t> version;  // advanced after each export (readers rescan when it moves)
  std::atomic<uint64_t> call[2];  // (sequence << 2) | kReachable or kUnreachable, by the sequence's parity
  SharedExport exports[kExportSlots];
};

struct AllocationExchange::Import {
  uint64_t generation = 0;
  cudaIpcMemHandle_t ipc{};
  void* base = nullptr;  // null: could not be opened
  ~Import() {
    if (base != nullptr) close_allocation(ipc);
  }
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "the outbox's words are shared between processes");

AllocationExchange::AllocationExchange(int rank, int nranks, int device)
    : rank_(rank), nranks_(nranks), device_(device) {
  if (nranks > kDirectPeers) throw std::runtime_error("jax_mscclpp: more ranks than the in-place kernel reaches");
  name_ = "/jax_mscclpp." + std::to_string(getpid()) + "." + std::to_string(g_outboxes.fetch_add(1));
  const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw std::runtime_error("jax_mscclpp: shm_open(" + name_ + ") failed: " + std::strerror(errno));
  void* at = ftruncate(fd, sizeof(Outbox)) == 0
                 ? mmap(nullptr, sizeof(Outbox), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                 : MAP_FAILED;
  const int error = errno;
  close(fd);
  if (at == MAP_FAILED) {
    shm_unlink(name_.c_str());
    throw std::runtime_error("jax_mscclpp: mapping the outbox " + name_ + " failed: " + std::strerror(error));
  }
  mine_ = new (at) Outbox{};  // the segment is zero-filled: every word starts at 0
  mine_->magic = kOutboxMagic;
  peers_.assign(nranks, nullptr);
  pids_.assign(nranks, -1);
  pids_[rank] = static_cast<int64_t>(getpid());
  peer_versions_.assign(nranks, 0);
  exports_.assign(kExportSlots, Export{});
  imports_.assign(nranks, std::vector<std::shared_ptr<Import>>(kExportSlots));
}

AllocationExchange::~AllocationExchange() {
  imports_.clear();
  for (Outbox* p : peers_)
    if (p != nullptr) munmap(p, sizeof(Outbox));
  if (mine_ != nullptr) munmap(mine_, sizeof(Outbox));
  shm_unlink(name_.c_str());
}

void AllocationExchange::add_peer(int peer, const std::string& name, int64_t pid) {
  if (peer < 0 || peer >= nranks_ || peer == rank_) throw std::invalid_argument("jax_mscclpp: bad peer rank");
  pids_[peer] = pid;
  if (pid == pids_[rank_]) return;  // of this process: never reached through the exchange (covers_every_peer)
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0)
    throw std::runtime_error("jax_mscclpp: opening the outbox " + name + " of rank " + std::to_string(peer) +
                             " failed: " + std::strerror(errno));
  void* at = mmap(nullptr, sizeof(Outbox), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (at == MAP_FAILED)
    throw std::runtime_error("jax_mscclpp: mapping the outbox of rank " + std::to_string(peer) +
                             " failed: " + std::strerror(error));
  Outbox* outbox = static_cast<Outbox*>(at);
  if (outbox->magic != kOutboxMagic) {
    munmap(at, sizeof(Outbox));
    throw std::runtime_error("jax_mscclpp: " + name + " is not an outbox of this version");
  }
  if (peers_[peer] != nullptr) munmap(peers_[peer], sizeof(Outbox));
  peers_[peer] = outbox;
}

int AllocationExchange::export_slot(const void* ptr, uint64_t bytes) {
  const DriverApi& api = driver_api();
  if (api.pointer_get_attributes == nullptr || ptr == nullptr) return -1;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long buffer_id = 0;
  void* values[] = {&base, &size, &buffer_id};
  if (api.pointer_get_attributes(3, which, values, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) return -1;
  const uint64_t at = reinterpret_cast<uint64_t>(ptr);
  if (base == 0 || at < base || at + bytes > base + size) return -1;
  auto found = slot_of_base_.find(base);
  int slot = -1;
  if (found != slot_of_base_.end()) {
    slot = found->second;
    const Export& e = exports_[slot];
    if (e.buffer_id == buffer_id && e.bytes == size) return slot;
  } else {
    for (int s = 0; s < kExportSlots && slot < 0; ++s)
      if (exports_[s].generation == 0) slot = s;
    if (slot < 0) return -1;
  }
  cudaIpcMemHandle_t ipc;
  {
    DeviceGuard g(device_);
    if (cudaIpcGetMemHandle(&ipc, reinterpret_cast<void*>(base)) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
  }
  Export& e = exports_[slot];
  e = Export{base, size, buffer_id, next_generation_++};
  slot_of_base_[base] = slot;
  SharedExport& shared = mine_->exports[slot];
  shared.generation.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  shared.base = base;
  shared.bytes = size;
  shared.ipc = ipc;
  shared.generation.store(e.generation, std::memory_order_release);
  mine_->version.fetch_add(1, std::memory_order_acq_rel);
  return slot;
}

void AllocationExchange::serve() {
  for (int p = 0; p < nranks_; ++p) {
    Outbox* outbox = peers_[p];
    if (outbox == nullptr) continue;
    const uint64_t version = outbox->version.load(std::memory_order_acquire);
    if (version == peer_versions_[p]) continue;
    for (int s = 0; s < kExportSlots; ++s) {
      SharedExport& shared = outbox->exports[s];
      const uint64_t generation = shared.generation.load(std::memory_order_acquire);
      std::shared_ptr<Import>& held = imports_[p][s];
      if (generation == 0 || (held && held->generation == generation)) continue;
      cudaIpcMemHandle_t ipc = shared.ipc;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (shared.generation.load(std::memory_order_relaxed) != generation) continue;  // rewritten meanwhile
      held.reset();  // the replaced allocation's mapping, if any
      auto opened = std::make_shared<Import>();
      opened->generation = generation;
      opened->ipc = ipc;
      opened->base = open_allocation(ipc, device_);
      held = opened;
      shared.address[rank_] = reinterpret_cast<uint64_t>(opened->base);
      shared.mapped[rank_].store(opened->base != nullptr ? generation : generation | kMapFailed,
                                 std::memory_order_release);
    }
    peer_versions_[p] = version;
  }
}

bool AllocationExchange::mapped_by_every_peer(int slot, bool& failed, int& missing) const {
  const uint64_t generation = exports_[slot].generation;
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    const uint64_t mapped = mine_->exports[slot].mapped[q].load(std::memory_order_acquire);
    if (mapped == (generation | kMapFailed)) {
      failed = true;
    } else if (mapped != generation) {
      missing = q;
      return false;
    }
  }
  return true;
}

uint64_t AllocationExchange::view_of(int slot, const void* ptr, int reader) const {
  const uint64_t offset = reinterpret_cast<uint64_t>(ptr) - exports_[slot].base;
  return mine_->exports[slot].address[reader] + offset;
}

bool AllocationExchange::covers_every_peer() const {
  std::set<int64_t> processes;
  for (int q = 0; q < nranks_; ++q)
    if ((q != rank_ && peers_[q] == nullptr) || !processes.insert(pids_[q]).second) return false;
  return nranks_ > 1;
}

bool AllocationExchange::agree(const void* in, uint64_t in_bytes, const void* out, uint64_t out_bytes,
                               double timeout_s, InPlaceBuffers& views) {
  serve();
  const int slots[2] = {export_slot(in, in_bytes), export_slot(out, out_bytes)};
  bool reachable = slots[0] >= 0 && slots[1] >= 0;
  for (int slot : slots) {
    if (!reachable) break;
    bool failed = false;
    int missing = -1;
    if (!wait_for(timeout_s, [&] {
          serve();
          return mapped_by_every_peer(slot, failed, missing);
        }))
      throw std::runtime_error("rank " + std::to_string(missing) + " did not map rank " + std::to_string(rank_) +
                               "'s buffer within " + std::to_string(timeout_s) + " s (is it still running?)");
    reachable = !failed;
  }
  const uint64_t sequence = ++calls_;
  const int parity = static_cast<int>(sequence & 1);
  mine_->call[parity].store((sequence << 2) | (reachable ? kReachable : kUnreachable), std::memory_order_release);
  bool everyone = reachable;
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    uint64_t word = 0;
    if (!wait_for(timeout_s, [&] {
          serve();
          word = peers_[q]->call[parity].load(std::memory_order_acquire);
          return (word >> 2) == sequence;
        }))
      throw std::runtime_error("rank " + std::to_string(q) + " did not reach call " + std::to_string(sequence) +
                               " in place with rank " + std::to_string(rank_) + " within " +
                               std::to_string(timeout_s) + " s");
    everyone = everyone && (word & 3) == kReachable;
  }
  if (!everyone) return false;
  for (int q = 0; q < nranks_; ++q) {
    views.in[q] = q == rank_ ? static_cast<const char*>(in) : reinterpret_cast<const char*>(view_of(slots[0], in, q));
    views.out[q] = q == rank_ ? static_cast<char*>(const_cast<void*>(out))
                              : reinterpret_cast<char*>(view_of(slots[1], out, q));
  }
  return true;
}

}  // namespace jax_mscclpp::cuda
