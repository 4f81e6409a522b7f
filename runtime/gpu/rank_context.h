// One rank's runtime on one device: registered scratch (and the call inbox after it), the semaphore pool, the
// device epoch, the pinned RuntimeConfig, the mappings of its peers' memory, and the channels built from them.
//
// Setup, for every pair of ranks (any transport):
//   a = RankContext(...); b = RankContext(...);
//   a.connect(b.rank, b.endpoint()); b.connect(a.rank, a.endpoint());   // bytes: any carrier
//   a.memory_channel(b.rank, i, src) ... copy the handles to the GPU.
// Semaphore words sit at fixed places in every rank's pool (a function of sender rank, channel index and
// kind), so endpoints carry only the two memory handles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allocation_exchange.h"
#include "collectives/collective.h"
#include "collectives/p2p_layout.h"
#include "jax_mscclpp/call_inbox.cuh"
#include "jax_mscclpp/epoch.cuh"
#include "jax_mscclpp/memory_channel.cuh"
#include "jax_mscclpp/port_channel.cuh"
#include "jax_mscclpp/switch_channel.cuh"
#include "memory.h"
#include "proxy.h"
#include "runtime_config.h"

namespace jax_mscclpp::cuda {

// The streaming kernels' knobs as the process's settings give them (JAX_MSCCLPP_STREAM_{BLOCK_BYTES,CHUNK,SLOTS},
// settings.def: the one place of their defaults), and their block count (JAX_MSCCLPP_STREAM_BLOCKS).
StreamTuning stream_tuning_setting();
int stream_blocks_setting();
bool stop_on_failure_setting();
bool direct_exchange_setting();
bool map_cumem_setting();

// The GPU communicators' defaults, the JAX path's (the module exports them) and the NCCL-API library's alike:
// registered scratch per rank (every protocol's region, both halves; larger messages are pipelined through it) and
// channels (thread blocks) per peer, one block per channel index for the ring and NVLS kernels.
constexpr size_t kGpuScratchBytes = 64ull << 20;
constexpr int kGpuChannelsPerPeer = 8;
// JAX_MSCCLPP_SCRATCH_BYTES, else kGpuScratchBytes.
size_t gpu_scratch_bytes_setting();

struct RankOptions {
  int device = 0;
  int rank = 0;
  int nranks = 1;
  size_t scratch_bytes = 1 << 20;
  int channels_per_peer = 1;  // semaphores per peer and kind: one channel per thread block, typically
  int stream_blocks = 0;      // thread blocks of the streaming kernels: two stream semaphores per peer and block
  // The streaming kernels' geometry knobs; every rank of a communicator must have the same (connect checks).
  StreamTuning stream_tuning = stream_tuning_setting();
  double timeout_s = 0;       // <= 0: the process's setting (runtime_settings.h)
  // A failing kernel stops instead of trapping (error_record.cuh): the process's JAX_MSCCLPP_TRAP_ON_FAILURE=0.
  bool stop_on_failure = stop_on_failure_setting();
  // What a wait past the timeout does (error_record.cuh): kFail, the JAX path's, a failure as stop_on_failure says;
  // kWait, the NCCL-API library's default (nccl/runtime/timeout_policy.h), reported late and waited on.
  TimeoutPolicy on_timeout = TimeoutPolicy::kFail;
  // Bytes of slots of the point-to-point engine (kernels/collectives/p2p_layout.h), after the call inbox in the
  // scratch allocation: < 0 p2p_default_bytes(scratch_bytes), 0 none (launch_p2p_group refuses). The same on
  // every rank of a communicator (connect checks).
  int64_t p2p_bytes = -1;
  // Ranks of this process reach each other's buffers: the ragged all-to-all writes its rows straight into their
  // outputs (P2PPeerHandle::direct) rather than through the rings, and where every peer is of this process the
  // streaming HB calls run in place on the posted buffers (CollectiveContext::direct, direct_algorithm). The same
  // on every rank of a communicator (connect checks).
  bool direct_exchange = direct_exchange_setting();
  // With direct_exchange: ranks of other processes of this host reach this rank's buffers too, through the
  // allocations that hold them, mapped and agreed per call (allocation_exchange.h): the JAX path's ranks. Where
  // shared memory is not available the rank goes without (its calls copy through scratch).
  bool exchange_allocations = false;
  // With exchange_allocations: cuMem allocations (XLA's allocator's, ncclMemAlloc's) travel too, as file
  // descriptors (JAX_MSCCLPP_MAP_CUMEM, allocation_exchange.h); else only those CUDA IPC exports.
  bool map_cumem = map_cumem_setting();
};

// The options of rank `rank` of `nranks` on `device` with `scratch_bytes` of scratch and kGpuChannelsPerPeer, its
// streaming kernels given device_stream_blocks(device) blocks.
RankOptions gpu_rank_options(int device, int rank, int nranks, size_t scratch_bytes);

// The streaming kernels' blocks of a rank on `device`: stream_blocks_setting(), never more than the device's
// multiprocessors (they wait across ranks block by block, so every block of one must be resident at once).
int device_stream_blocks(int device);

// The grid a streaming or in-place launch of a rank gets when `ranks_on_gpu` ranks of one process drive its GPU
// (kernels of one process run at once, those of other processes take turns): the rank's `stream_blocks` divided
// among them, so that every block of every rank's launch is resident together; at least 1.
int shared_gpu_grid(int stream_blocks, int ranks_on_gpu);

class RankContext {
 public:
  explicit RankContext(const RankOptions& opts);
  ~RankContext();
  RankContext(const RankContext&) = delete;
  RankContext& operator=(const RankContext&) = delete;

  int rank() const { return opts_.rank; }
  int nranks() const { return opts_.nranks; }
  int device() const { return opts_.device; }
  int channels_per_peer() const { return opts_.channels_per_peer; }

  int stream_blocks() const { return opts_.stream_blocks; }
  const StreamTuning& stream_tuning() const { return opts_.stream_tuning; }

  char* scratch() const { return scratch_.get(); }
  // The scratch the collectives use; the call inbox follows it in the same allocation (mapped by peers alike).
  size_t scratch_bytes() const { return opts_.scratch_bytes; }
  // The replicated epoch count, kEpochSlots words of device memory (jax_mscclpp/epoch.cuh).
  uint64_t* epoch() const { return pool_.get<uint64_t>() + kEpochWord; }
  RuntimeConfigHost& config() { return *config_; }
  WaitSite site(int peer) const { return config_->site(peer); }

  // Bytes a peer passes to connect(): this rank's scratch and semaphore pool handles.
  std::string endpoint() const;
  void connect(int peer, const std::string& remote_endpoint);
  bool connected(int peer) const;
  // The peer's scratch mapped here (the rank's own scratch for peer == rank).
  char* peer_scratch(int peer) const;
  // The direct exchange with `peer` (RankOptions::direct_exchange): on, and the peer connected from this process,
  // so that the device addresses it posts are valid here. direct_to_every_peer: so with every peer (and one at least).
  bool direct_to(int peer) const;
  bool direct_to_every_peer() const;
  // Where some peer is of another process and every peer's outbox is open (RankOptions::exchange_allocations on
  // every rank, all of one host): the exchange through which the ranks reach each other's buffers; else nullptr.
  AllocationExchange* allocation_exchange() const;
  // Why allocation_exchange() is null ("" where it is not).
  std::string allocation_exchange_absence() const;

  // Channel `index` to `peer`. `local` is this rank's buffer that offset-based puts read from.
  MemoryChannelDeviceHandle memory_channel(int peer, int index, char* local) const;
  // Registers the channel with the process's proxy service (started on first use).
  PortChannelDeviceHandle port_channel(int peer, int index, const char* local, size_t local_bytes);
  // Emulated SwitchChannel over every rank's scratch (all peers connected). The member table lives in a
  // device buffer owned by this context.
  SwitchChannelDeviceHandle switch_channel_emulated();

  // The streaming kernels' semaphores to `peer` for thread block `block` (< stream_blocks): kind 0 carries
  // "chunk written" signals, kind 1 "slot consumed" credits (kernels/collectives/stream.cuh).
  static constexpr int kStreamKinds = 2;
  D2DSemaphoreDeviceHandle stream_semaphore(int peer, int block, int kind) const;

  // The point-to-point engine's layout (a function of nranks and the p2p budget, the same on every rank) and what
  // this rank holds of `peer` (kernels/collectives/p2p_layout.h): its counter words in this rank's pool, this
  // rank's counter words in the peer's pool, and the slot rings of the pair in both regions.
  const P2PLayout& p2p_layout() const { return p2p_layout_; }
  P2PPeerHandle p2p_peer(int peer) const;

 private:
  // Pool words: [epoch slots | channel semaphores | stream semaphores | p2p counters], each semaphore two words
  // (inbound, expected) at a place that depends only on (sender, index, kind), the same on every rank; the p2p
  // counters kP2PWords per (peer, lane).
  static constexpr size_t kEpochWord = 0;
  static constexpr size_t kFirstSemaphoreWord = kEpochSlots;
  enum Kind { kMemory = 0, kPort = 1 };
  // Index of the inbound word, on the receiving rank, of semaphore (sender, index, kind); the word after it
  // is the receiver's `expected` count.
  size_t semaphore_word(int sender, int index, Kind kind) const;
  size_t stream_semaphore_word(int sender, int block, int kind) const;
  size_t p2p_word(int peer, int lane) const;
  void check_peer(int peer, int index) const;

  RankOptions opts_;
  P2PLayout p2p_layout_{};
  std::unique_ptr<RuntimeConfigHost> config_;
  DeviceBuffer scratch_;
  DeviceBuffer pool_;
  std::vector<MappedMemory> peer_scratch_;
  std::vector<MappedMemory> peer_pool_;
  std::shared_ptr<ProxyService> proxy_;
  std::vector<uint32_t> port_channel_ids_;
  DeviceBuffer switch_members_;
  std::unique_ptr<AllocationExchange> allocations_;
  std::string allocations_error_;  // why the rank has no AllocationExchange where it asked for one
};

}  // namespace jax_mscclpp::cuda
