#include "rank_context.h"

#include <cstring>
#include <stdexcept>

#include "check.h"
#include "jax_mscclpp/settings.h"

namespace jax_mscclpp::cuda {
namespace {

constexpr uint32_t kEndpointMagic = 0x4A4D4550;  // "JMEP"

struct EndpointHeader {
  uint32_t magic;
  int32_t rank;
  int32_t nranks;
  int32_t channels_per_peer;
  int32_t stream_blocks;
  int32_t stream_slots;
  uint64_t stream_block_bytes;
  uint64_t stream_max_chunk;
  uint64_t p2p_bytes;
  uint32_t direct_exchange;
  uint32_t unused;
  char outbox[AllocationExchange::kNameBytes];  // the rank's AllocationExchange, "" where it has none
};

}  // namespace

RankContext::RankContext(const RankOptions& opts) : opts_(opts) {
  if (opts.nranks < 1 || opts.rank < 0 || opts.rank >= opts.nranks || opts.channels_per_peer < 1 ||
      opts.stream_blocks < 0 || opts.stream_blocks > kEpochSlots)
    throw std::invalid_argument("jax_mscclpp: bad rank options");
  config_ = std::make_unique<RuntimeConfigHost>(opts.rank, opts.timeout_s, opts.stop_on_failure, opts.on_timeout);
  if (opts_.p2p_bytes < 0) opts_.p2p_bytes = static_cast<int64_t>(p2p_default_bytes(opts.scratch_bytes));
  p2p_layout_ = P2PLayout::of(opts.nranks, static_cast<uint64_t>(opts_.p2p_bytes));
  // The registered scratch, then the call inbox the kernels' call checks use (jax_mscclpp/call_check.cuh), then
  // the point-to-point region (p2p_layout.h): one allocation, so peers map all of it through one handle.
  const size_t inbox_end = call_inbox_offset(opts.scratch_bytes) + call_inbox_bytes(opts.nranks);
  scratch_ = DeviceBuffer(opts.device, p2p_layout_.usable()
                                           ? p2p_region_offset(opts.scratch_bytes, opts.nranks) + p2p_layout_.region_bytes
                                           : inbox_end);
  config_->set_call_inbox(scratch_.get() + call_inbox_offset(opts.scratch_bytes));
  const size_t words = p2p_word(opts.nranks, 0);
  pool_ = DeviceBuffer(opts.device, words * sizeof(uint64_t));
  peer_scratch_.resize(opts.nranks);
  peer_pool_.resize(opts.nranks);
  if (opts.exchange_allocations && opts.direct_exchange && opts.nranks > 1 && opts.nranks <= kDirectPeers) {
    try {
      allocations_ = std::make_unique<AllocationExchange>(opts.rank, opts.nranks, opts.device, opts.map_cumem);
    } catch (const std::runtime_error& error) {
      allocations_error_ = error.what();  // no shared memory here: this rank's calls copy through scratch
    }
  }
}

RankContext::~RankContext() {
  if (proxy_) {
    for (uint32_t id : port_channel_ids_) proxy_->remove_channel(id);
    proxy_.reset();
  }
  allocations_.reset();
  peer_scratch_.clear();
  peer_pool_.clear();
}

size_t RankContext::semaphore_word(int sender, int index, Kind kind) const {
  return kFirstSemaphoreWord + ((static_cast<size_t>(sender) * opts_.channels_per_peer + index) * 2 + kind) * 2;
}

size_t RankContext::stream_semaphore_word(int sender, int block, int kind) const {
  const size_t first = semaphore_word(opts_.nranks, 0, kMemory);
  return first + ((static_cast<size_t>(sender) * opts_.stream_blocks + block) * kStreamKinds + kind) * 2;
}

size_t RankContext::p2p_word(int peer, int lane) const {
  return stream_semaphore_word(opts_.nranks, 0, 0) + (static_cast<size_t>(peer) * kP2PLanes + lane) * kP2PWords;
}

std::string RankContext::endpoint() const {
  const StreamTuning& t = opts_.stream_tuning;
  EndpointHeader h{kEndpointMagic, opts_.rank,    opts_.nranks, opts_.channels_per_peer,
                   opts_.stream_blocks, t.slots, t.block_bytes, t.max_chunk,
                   static_cast<uint64_t>(opts_.p2p_bytes), opts_.direct_exchange ? 1u : 0u, 0u, {}};
  if (allocations_) std::strncpy(h.outbox, allocations_->name().c_str(), sizeof(h.outbox) - 1);
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out += MemoryHandle::make(scratch_.get(), scratch_.bytes(), opts_.device).serialize();
  out += MemoryHandle::make(pool_.get(), pool_.bytes(), opts_.device).serialize();
  return out;
}

void RankContext::connect(int peer, const std::string& remote) {
  if (peer < 0 || peer >= opts_.nranks || peer == opts_.rank)
    throw std::invalid_argument("jax_mscclpp: connect: bad peer rank");
  const size_t hsize = sizeof(MemoryHandle);
  if (remote.size() != sizeof(EndpointHeader) + 2 * hsize)
    throw std::invalid_argument("jax_mscclpp: connect: endpoint has the wrong size");
  EndpointHeader h;
  std::memcpy(&h, remote.data(), sizeof(h));
  if (h.magic != kEndpointMagic) throw std::invalid_argument("jax_mscclpp: connect: not an endpoint");
  if (h.rank != peer || h.nranks != opts_.nranks || h.channels_per_peer != opts_.channels_per_peer)
    throw std::invalid_argument("jax_mscclpp: connect: endpoint of rank " + std::to_string(h.rank) + "/" +
                                std::to_string(h.nranks) + " does not match peer " + std::to_string(peer) + "/" +
                                std::to_string(opts_.nranks));
  const StreamTuning& t = opts_.stream_tuning;
  if (h.stream_blocks != opts_.stream_blocks || h.stream_slots != t.slots || h.stream_block_bytes != t.block_bytes ||
      h.stream_max_chunk != t.max_chunk)
    throw std::invalid_argument(
        "jax_mscclpp: connect: rank " + std::to_string(peer) + " streams with other settings than rank " +
        std::to_string(opts_.rank) + " (JAX_MSCCLPP_STREAM_BLOCKS, _BLOCK_BYTES, _CHUNK and _SLOTS must be the same "
        "in every process, and the GPUs must have as many multiprocessors)");
  if (h.p2p_bytes != static_cast<uint64_t>(opts_.p2p_bytes))
    throw std::invalid_argument("jax_mscclpp: connect: rank " + std::to_string(peer) + " has " +
                                std::to_string(h.p2p_bytes) + " bytes of point-to-point slots, rank " +
                                std::to_string(opts_.rank) + " " + std::to_string(opts_.p2p_bytes) +
                                " (every rank needs the same)");
  if ((h.direct_exchange != 0) != opts_.direct_exchange)
    throw std::invalid_argument("jax_mscclpp: connect: rank " + std::to_string(peer) + " and rank " +
                                std::to_string(opts_.rank) + " differ in the direct exchange (every rank needs the same)");
  MemoryHandle scratch = MemoryHandle::deserialize(remote.substr(sizeof(h), hsize));
  MemoryHandle pool = MemoryHandle::deserialize(remote.substr(sizeof(h) + hsize, hsize));
  peer_scratch_[peer] = MappedMemory(scratch, opts_.device);
  peer_pool_[peer] = MappedMemory(pool, opts_.device);
  if (allocations_ && h.outbox[0] != '\0' && pool.host_id == host_identity())
    allocations_->add_peer(peer, std::string(h.outbox, strnlen(h.outbox, sizeof(h.outbox))), pool.process);
}

bool RankContext::connected(int peer) const {
  return peer == opts_.rank || (peer >= 0 && peer < opts_.nranks && peer_pool_[peer].get() != nullptr);
}

char* RankContext::peer_scratch(int peer) const {
  if (peer == opts_.rank) return scratch_.get();
  check_peer(peer, 0);
  return peer_scratch_[peer].get();
}

void RankContext::check_peer(int peer, int index) const {
  if (peer < 0 || peer >= opts_.nranks || peer == opts_.rank || !connected(peer))
    throw std::invalid_argument("jax_mscclpp: peer " + std::to_string(peer) + " is not connected to rank " +
                                std::to_string(opts_.rank));
  if (index < 0 || index >= opts_.channels_per_peer)
    throw std::invalid_argument("jax_mscclpp: channel index out of range");
}

MemoryChannelDeviceHandle RankContext::memory_channel(int peer, int index, char* local) const {
  check_peer(peer, index);
  MemoryChannelDeviceHandle h;
  uint64_t* mine = pool_.get<uint64_t>();
  uint64_t* theirs = reinterpret_cast<uint64_t*>(peer_pool_[peer].get());
  h.semaphore.inbound = mine + semaphore_word(peer, index, kMemory);
  h.semaphore.expected = h.semaphore.inbound + 1;
  h.semaphore.remote_inbound = theirs + semaphore_word(opts_.rank, index, kMemory);
  h.semaphore.site = site(peer);
  h.remote = peer_scratch_[peer].get();
  h.local = local;
  h.packets = scratch_.get();
  return h;
}

D2DSemaphoreDeviceHandle RankContext::stream_semaphore(int peer, int block, int kind) const {
  check_peer(peer, 0);
  if (block < 0 || block >= opts_.stream_blocks || kind < 0 || kind >= kStreamKinds)
    throw std::invalid_argument("jax_mscclpp: stream semaphore out of range");
  uint64_t* mine = pool_.get<uint64_t>();
  uint64_t* theirs = reinterpret_cast<uint64_t*>(peer_pool_[peer].get());
  D2DSemaphoreDeviceHandle h;
  h.inbound = mine + stream_semaphore_word(peer, block, kind);
  h.expected = h.inbound + 1;
  h.remote_inbound = theirs + stream_semaphore_word(opts_.rank, block, kind);
  h.site = site(peer);
  return h;
}

P2PPeerHandle RankContext::p2p_peer(int peer) const {
  check_peer(peer, 0);
  if (!p2p_layout_.usable()) throw std::invalid_argument("jax_mscclpp: the rank has no point-to-point slots");
  const uint64_t region = p2p_region_offset(opts_.scratch_bytes, opts_.nranks);
  P2PPeerHandle h;
  h.words = pool_.get<uint64_t>() + p2p_word(peer, 0);
  h.remote_words = reinterpret_cast<uint64_t*>(peer_pool_[peer].get()) + p2p_word(opts_.rank, 0);
  h.local_rings = scratch_.get() + region + p2p_layout_.rings_offset(peer, opts_.rank);
  h.remote_rings = peer_scratch_[peer].get() + region + p2p_layout_.rings_offset(opts_.rank, peer);
  h.site = site(peer);
  h.direct = direct_to(peer) ? 1 : 0;
  return h;
}

bool RankContext::direct_to(int peer) const {
  return opts_.direct_exchange && peer != opts_.rank && connected(peer) && peer_pool_[peer].in_this_process();
}

bool RankContext::direct_to_every_peer() const {
  for (int q = 0; q < opts_.nranks; ++q)
    if (q != opts_.rank && !direct_to(q)) return false;
  return opts_.nranks > 1;
}

std::string RankContext::allocation_exchange_absence() const {
  if (!opts_.exchange_allocations) return "the rank was made without it";
  if (!opts_.direct_exchange) return "the direct exchange is off (JAX_MSCCLPP_DIRECT_EXCHANGE=0)";
  if (opts_.nranks < 2 || opts_.nranks > kDirectPeers)
    return "it serves 2 to " + std::to_string(kDirectPeers) + " ranks";
  if (!allocations_) return allocations_error_;
  if (direct_to_every_peer()) return "every rank is of this process (their calls run in place on posted addresses)";
  if (!allocations_->covers_every_peer())
    return "some process drives several ranks, or some rank is on another host or has no outbox";
  return "";
}

AllocationExchange* RankContext::allocation_exchange() const {
  if (!allocations_ || direct_to_every_peer() || !allocations_->covers_every_peer()) return nullptr;
  return allocations_.get();
}

PortChannelDeviceHandle RankContext::port_channel(int peer, int index, const char* local, size_t local_bytes) {
  check_peer(peer, index);
  if (!proxy_) proxy_ = ProxyService::shared(opts_.device);
  uint64_t* mine = pool_.get<uint64_t>();
  uint64_t* theirs = reinterpret_cast<uint64_t*>(peer_pool_[peer].get());
  const uint32_t id = proxy_->add_channel(peer_scratch_[peer].get(), peer_scratch_[peer].bytes(), local, local_bytes,
                                          theirs + semaphore_word(opts_.rank, index, kPort));
  port_channel_ids_.push_back(id);
  PortChannelDeviceHandle h;
  h.fifo = proxy_->fifo_handle(site(-1));
  h.semaphore.inbound = mine + semaphore_word(peer, index, kPort);
  h.semaphore.expected = h.semaphore.inbound + 1;
  h.semaphore.site = site(peer);
  h.channel_id = id;
  return h;
}

SwitchChannelDeviceHandle RankContext::switch_channel_emulated() {
  if (opts_.nranks > kMaxSwitchMembers) throw std::invalid_argument("jax_mscclpp: SwitchChannel has at most 8 members");
  std::vector<char*> members(opts_.nranks);
  for (int r = 0; r < opts_.nranks; ++r) members[r] = peer_scratch(r);
  if (switch_members_.get() == nullptr) switch_members_ = DeviceBuffer(opts_.device, members.size() * sizeof(char*));
  JAX_MSCCLPP_CUDA_CHECK(
      cudaMemcpy(switch_members_.get(), members.data(), members.size() * sizeof(char*), cudaMemcpyHostToDevice));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));  // visible to kernels on any stream
  SwitchChannelDeviceHandle h;
  h.multicast = nullptr;
  h.members = switch_members_.get<char*>();
  h.local = scratch_.get();
  h.nranks = opts_.nranks;
  h.rank = opts_.rank;
  return h;
}

StreamTuning stream_tuning_setting() {
  StreamTuning t{};
  t.block_bytes = positive_integer_setting(Setting::kStreamBlockBytes);
  t.max_chunk = (positive_integer_setting(Setting::kStreamChunk) + 15) / 16 * 16;
  const uint64_t slots = positive_integer_setting(Setting::kStreamSlots);
  t.slots = static_cast<int32_t>(slots < 1024 ? slots : 1024);
  return t;
}

bool stop_on_failure_setting() {
  const char* value = setting_value(Setting::kTrapOnFailure);
  return value != nullptr && std::strcmp(value, "0") == 0;
}

bool map_cumem_setting() {
  const char* value = setting_value(Setting::kMapCuMem);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

bool direct_exchange_setting() {
  const char* value = setting_value(Setting::kDirectExchange);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

int stream_blocks_setting() {
  const uint64_t blocks = positive_integer_setting(Setting::kStreamBlocks);
  return static_cast<int>(blocks < kEpochSlots ? blocks : kEpochSlots);
}

size_t gpu_scratch_bytes_setting() {
  return static_cast<size_t>(positive_integer_setting(Setting::kScratchBytes, kGpuScratchBytes));
}

int device_stream_blocks(int device) {
  const int stream_blocks = stream_blocks_setting();
  int sms = 0;
  JAX_MSCCLPP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return stream_blocks < sms ? stream_blocks : sms;
}

int shared_gpu_grid(int stream_blocks, int ranks_on_gpu) {
  const int grid = stream_blocks / (ranks_on_gpu < 1 ? 1 : ranks_on_gpu);
  return grid < 1 ? 1 : grid;
}

RankOptions gpu_rank_options(int device, int rank, int nranks, size_t scratch_bytes) {
  RankOptions options;
  options.device = device;
  options.rank = rank;
  options.nranks = nranks;
  options.scratch_bytes = scratch_bytes;
  options.channels_per_peer = kGpuChannelsPerPeer;
  options.stream_blocks = device_stream_blocks(device);
  return options;
}

}  // namespace jax_mscclpp::cuda
