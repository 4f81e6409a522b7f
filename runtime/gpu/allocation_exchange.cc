#include "allocation_exchange.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "check.h"
#include "driver_api.h"
#include "gpu_identity.h"

namespace jax_mscclpp::cuda {
namespace {

constexpr uint64_t kOutboxMagic = 0x4A4D414C4C4F4331ull;  // "JMALLOC1"
constexpr uint64_t kMapFailed = 1ull << 63;               // in a reader's mapped word: it could not open that generation
constexpr uint64_t kReachable = 1, kUnreachable = 2;      // a call word's low bits

std::atomic<uint64_t> g_outboxes{0};

// A fresh outbox name (also its Unix socket's, in the abstract namespace). The process id alone does not make it
// unique: /dev/shm and the abstract socket namespace may be shared with processes of other PID namespaces
// (containers on one host), and an outbox a killed process left behind keeps its name; a random part does.
std::string outbox_name() {
  std::random_device random;
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%08x%08x", static_cast<unsigned>(random()), static_cast<unsigned>(random()));
  return "/jax_mscclpp." + std::to_string(getpid()) + "." + std::to_string(g_outboxes.fetch_add(1)) + "." + nonce;
}

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

// A cuMem allocation of another process imported from its file descriptor and mapped here; unmapped on destruction.
struct ImportedMapping {
  CUdeviceptr address = 0;
  size_t bytes = 0;
  ~ImportedMapping() {
    const DriverApi& api = driver_api();
    if (address == 0) return;
    api.mem_unmap(address, bytes);
    api.mem_address_free(address, bytes);
  }
};

bool has_cumem_sharing(const DriverApi& api) {
  return api.mem_retain_allocation_handle && api.mem_export_to_shareable_handle &&
         api.mem_import_from_shareable_handle && api.mem_release && api.mem_address_reserve && api.mem_address_free &&
         api.mem_map && api.mem_unmap && api.mem_set_access;
}

// Imports the allocation `fd` names and maps its `bytes` on `device` (read and write); null where any step fails.
std::unique_ptr<ImportedMapping> import_mapping(int fd, size_t bytes, int device) {
  const DriverApi& api = driver_api();
  if (!has_cumem_sharing(api)) return nullptr;
  CUmemGenericAllocationHandle handle = 0;
  if (api.mem_import_from_shareable_handle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS)
    return nullptr;
  auto mapping = std::make_unique<ImportedMapping>();
  CUdeviceptr address = 0;
  bool ok = api.mem_address_reserve(&address, bytes, 0, 0, 0) == CUDA_SUCCESS;
  if (ok && api.mem_map(address, bytes, 0, handle, 0) != CUDA_SUCCESS) {
    api.mem_address_free(address, bytes);
    ok = false;
  }
  api.mem_release(handle);  // the mapping holds the allocation from here on
  if (!ok) return nullptr;
  mapping->address = address;
  mapping->bytes = bytes;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (api.mem_set_access(address, bytes, &access, 1) != CUDA_SUCCESS) return nullptr;
  return mapping;
}

// The abstract socket address of the outbox named `name` (its leading '/' dropped).
sockaddr_un socket_address(const std::string& name, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string abstract = name.substr(1);
  std::memcpy(address.sun_path + 1, abstract.data(), abstract.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract.size());
  return address;
}

// What a descriptor's datagram says besides the descriptor.
struct DescriptorMessage {
  int32_t sender;
  int32_t slot;
  uint64_t generation;
};

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
  uint64_t transport;                // kIpcTransport or kDescriptorTransport
  cudaIpcMemHandle_t ipc;            // kIpcTransport's
  std::atomic<uint64_t> mapped[kDirectPeers];  // by reader: the generation it mapped (| kMapFailed)
  uint64_t address[kDirectPeers];              // by reader: `base` in its process
};

namespace {
constexpr uint64_t kIpcTransport = 1, kDescriptorTransport = 2;
}  // namespace

struct AllocationExchange::Outbox {
  uint64_t magic;
  std::atomic<uint64_t> version;  // advanced after each export (readers rescan when it moves)
  std::atomic<uint64_t> call[2];  // (sequence << 2) | kReachable or kUnreachable, by the sequence's parity
  SharedExport exports[kExportSlots];
};

struct AllocationExchange::Import {
  uint64_t generation = 0;
  cudaIpcMemHandle_t ipc{};
  void* base = nullptr;  // kIpcTransport's (null: could not be opened)
  std::unique_ptr<ImportedMapping> mapping;  // kDescriptorTransport's
  ~Import() {
    if (base != nullptr) close_allocation(ipc);
  }
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "the outbox's words are shared between processes");

AllocationExchange::AllocationExchange(int rank, int nranks, int device, bool map_cumem)
    : rank_(rank), nranks_(nranks), device_(device) {
  if (nranks > kDirectPeers) throw std::runtime_error("jax_mscclpp: more ranks than the in-place kernel reaches");
  int fd = -1;
  for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {  // a name taken already: another draw
    name_ = outbox_name();
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
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
  peer_names_.assign(nranks, "");
  processes_.assign(nranks, -1);
  processes_[rank] = this_process_identity();
  peer_versions_.assign(nranks, 0);
  exports_.assign(kExportSlots, Export{});
  imports_.assign(nranks, std::vector<std::shared_ptr<Import>>(kExportSlots));
  if (map_cumem && has_cumem_sharing(driver_api())) {
    socket_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t length = 0;
    const sockaddr_un address = socket_address(name_, length);
    if (socket_ >= 0 && bind(socket_, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
      close(socket_);  // cuMem allocations then copy through scratch
      socket_ = -1;
    }
  }
}

AllocationExchange::~AllocationExchange() {
  imports_.clear();
  for (const Descriptor& d : to_send_) close(d.fd);
  for (const Descriptor& d : received_) close(d.fd);
  if (socket_ >= 0) close(socket_);
  for (Outbox* p : peers_)
    if (p != nullptr) munmap(p, sizeof(Outbox));
  if (mine_ != nullptr) munmap(mine_, sizeof(Outbox));
  shm_unlink(name_.c_str());
}

void AllocationExchange::add_peer(int peer, const std::string& name, int64_t process) {
  if (peer < 0 || peer >= nranks_ || peer == rank_) throw std::invalid_argument("jax_mscclpp: bad peer rank");
  processes_[peer] = process;
  if (process == processes_[rank_]) return;  // of this process: never reached through the exchange (covers_every_peer)
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
  peer_names_[peer] = name;
}

int AllocationExchange::export_slot(const void* ptr, uint64_t bytes) {
  const DriverApi& api = driver_api();
  if (api.pointer_get_attributes == nullptr || ptr == nullptr) return -1;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  CUdeviceptr range_start = 0;
  size_t range_size = 0;
  unsigned long long buffer_id = 0;
  int legacy_ipc = 0;
  void* values[] = {&range_start, &range_size, &buffer_id, &legacy_ipc};
  const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(ptr);
  if (api.pointer_get_attributes(4, which, values, at) != CUDA_SUCCESS) return -1;
  Allocation a{range_start, range_size, buffer_id, legacy_ipc != 0};
  if (!a.legacy_ipc) {
    // A cuMem mapping: the physical allocation mapped at the buffer (what a file descriptor exports), which a
    // reserved range may hold beside others.
    if (socket_ < 0) return -1;
    CUpointer_attribute mapping[] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
    void* mapping_base = nullptr;
    size_t mapping_size = 0;
    void* mapping_values[] = {&mapping_base, &mapping_size};
    if (api.pointer_get_attributes(2, mapping, mapping_values, at) != CUDA_SUCCESS) return -1;
    a.base = reinterpret_cast<uint64_t>(mapping_base);
    a.bytes = mapping_size;
  }
  if (a.base == 0 || at < a.base || at + bytes > a.base + a.bytes) return -1;
  auto found = slot_of_base_.find(a.base);
  int slot = -1;
  if (found != slot_of_base_.end()) {
    slot = found->second;
    const Export& e = exports_[slot];
    if (e.buffer_id == a.buffer_id && e.bytes == a.bytes) return slot;
  } else {
    for (int s = 0; s < kExportSlots && slot < 0; ++s)
      if (exports_[s].generation == 0) slot = s;
    if (slot < 0) return -1;
  }
  return publish(slot, a) ? slot : -1;
}

bool AllocationExchange::publish(int slot, const Allocation& a) {
  const DriverApi& api = driver_api();
  cudaIpcMemHandle_t ipc{};
  int fd = -1;
  if (a.legacy_ipc) {
    DeviceGuard g(device_);
    if (cudaIpcGetMemHandle(&ipc, reinterpret_cast<void*>(a.base)) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
  } else {
    CUmemGenericAllocationHandle handle = 0;
    if (api.mem_retain_allocation_handle(&handle, reinterpret_cast<void*>(a.base)) != CUDA_SUCCESS) return false;
    const bool exported = api.mem_export_to_shareable_handle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                             0) == CUDA_SUCCESS;
    api.mem_release(handle);
    if (!exported) return false;
  }
  Export& e = exports_[slot];
  e = Export{a.base, a.bytes, a.buffer_id, next_generation_++};
  slot_of_base_[a.base] = slot;
  SharedExport& shared = mine_->exports[slot];
  shared.generation.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  shared.base = a.base;
  shared.bytes = a.bytes;
  shared.transport = a.legacy_ipc ? kIpcTransport : kDescriptorTransport;
  shared.ipc = ipc;
  shared.generation.store(e.generation, std::memory_order_release);
  mine_->version.fetch_add(1, std::memory_order_acq_rel);
  if (fd >= 0) {
    for (int q = 0; q < nranks_; ++q)
      if (q != rank_) to_send_.push_back({q, slot, e.generation, dup(fd)});
    close(fd);
    send_descriptors();
  }
  return true;
}

void AllocationExchange::send_descriptors() {
  std::vector<Descriptor> later;
  for (const Descriptor& d : to_send_) {
    const Export& e = exports_[d.slot];
    if (d.fd < 0 || e.generation != d.generation) {  // replaced since: the peer needs the new one only
      if (d.fd >= 0) close(d.fd);
      continue;
    }
    DescriptorMessage message{rank_, d.slot, d.generation};
    iovec data{&message, sizeof(message)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr header{};
    socklen_t length = 0;
    sockaddr_un address = socket_address(peer_names_[d.peer], length);
    header.msg_name = &address;
    header.msg_namelen = length;
    header.msg_iov = &data;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof(control);
    cmsghdr* rights = CMSG_FIRSTHDR(&header);
    rights->cmsg_level = SOL_SOCKET;
    rights->cmsg_type = SCM_RIGHTS;
    rights->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(rights), &d.fd, sizeof(int));
    if (sendmsg(socket_, &header, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(message))) {
      close(d.fd);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      later.push_back(d);  // the peer's queue is full: again at the next wait
    } else {  // the peer has no socket: it never maps this generation, and the calls copy through scratch
      close(d.fd);
      mine_->exports[d.slot].mapped[d.peer].store(d.generation | kMapFailed, std::memory_order_release);
    }
  }
  to_send_.swap(later);
}

void AllocationExchange::receive_descriptors() {
  for (;;) {
    DescriptorMessage message{};
    iovec data{&message, sizeof(message)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr header{};
    header.msg_iov = &data;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof(control);
    const ssize_t got = recvmsg(socket_, &header, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0) return;
    const cmsghdr* rights = CMSG_FIRSTHDR(&header);
    int fd = -1;
    if (rights != nullptr && rights->cmsg_level == SOL_SOCKET && rights->cmsg_type == SCM_RIGHTS)
      std::memcpy(&fd, CMSG_DATA(rights), sizeof(int));
    if (got != static_cast<ssize_t>(sizeof(message)) || fd < 0 || message.sender < 0 || message.sender >= nranks_ ||
        message.slot < 0 || message.slot >= kExportSlots) {
      if (fd >= 0) close(fd);
      continue;
    }
    received_.push_back({message.sender, message.slot, message.generation, fd});
  }
}

void AllocationExchange::serve() {
  if (socket_ >= 0) {
    if (!to_send_.empty()) send_descriptors();
    receive_descriptors();
  }
  for (int p = 0; p < nranks_; ++p) {
    Outbox* outbox = peers_[p];
    if (outbox == nullptr) continue;
    const uint64_t version = outbox->version.load(std::memory_order_acquire);
    if (version == peer_versions_[p]) continue;
    bool waiting = false;  // for a descriptor not yet received: scan again at the next serve
    for (int s = 0; s < kExportSlots; ++s) {
      SharedExport& shared = outbox->exports[s];
      const uint64_t generation = shared.generation.load(std::memory_order_acquire);
      std::shared_ptr<Import>& held = imports_[p][s];
      if (generation == 0 || (held && held->generation == generation)) continue;
      if (shared.mapped[rank_].load(std::memory_order_acquire) == (generation | kMapFailed)) continue;  // unsendable
      const uint64_t transport = shared.transport;
      const uint64_t bytes = shared.bytes;
      cudaIpcMemHandle_t ipc = shared.ipc;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (shared.generation.load(std::memory_order_relaxed) != generation) continue;  // rewritten meanwhile
      auto opened = std::make_shared<Import>();
      opened->generation = generation;
      uint64_t address = 0;
      if (transport == kIpcTransport) {
        opened->ipc = ipc;
        opened->base = open_allocation(ipc, device_);
        address = reinterpret_cast<uint64_t>(opened->base);
      } else {
        auto sent = std::find_if(received_.begin(), received_.end(), [&](const Descriptor& d) {
          return d.peer == p && d.slot == s && d.generation == generation;
        });
        if (sent == received_.end()) {
          if (socket_ >= 0) {
            waiting = true;
            continue;
          }
        } else {
          opened->mapping = import_mapping(sent->fd, bytes, device_);
          close(sent->fd);
          received_.erase(sent);
          if (opened->mapping) address = opened->mapping->address;
        }
      }
      held = opened;  // the replaced allocation's mapping, if any, goes
      shared.address[rank_] = address;
      shared.mapped[rank_].store(address != 0 ? generation : generation | kMapFailed, std::memory_order_release);
    }
    if (!waiting) peer_versions_[p] = version;
  }
  // Descriptors of generations since replaced.
  for (auto d = received_.begin(); d != received_.end();) {
    const std::shared_ptr<Import>& held = imports_[d->peer][d->slot];
    if (held && held->generation >= d->generation) {
      close(d->fd);
      d = received_.erase(d);
    } else {
      ++d;
    }
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
    if ((q != rank_ && peers_[q] == nullptr) || !processes.insert(processes_[q]).second) return false;
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
