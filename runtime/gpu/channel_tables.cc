#include "channel_tables.h"

#include <stdexcept>
#include <vector>

#include "check.h"

namespace jax_mscclpp::cuda {
namespace {

// A device copy of `v`; one spare byte keeps the allocation non-empty for a world of one rank.
template <class T>
DeviceBuffer upload(int device, const std::vector<T>& v) {
  DeviceBuffer buf(device, v.size() * sizeof(T) + 1);
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpy(buf.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buf;
}

}  // namespace

ChannelTableLayout collective_channel_layout(const RankContext& ctx, bool port_channels) {
  ChannelTableLayout layout;
  layout.port_channels_per_peer = port_channels ? ctx.channels_per_peer() : 0;
  return layout;
}

ChannelTables::ChannelTables(RankContext& ctx, const ChannelTableLayout& layout) {
  const int n = ctx.nranks(), me = ctx.rank(), cpp = ctx.channels_per_peer(), ppp = layout.port_channels_per_peer;
  if (ppp < 0 || ppp > cpp)
    throw std::invalid_argument("jax_mscclpp: port channels per peer must lie in [0, channels per peer]");
  DeviceGuard guard(ctx.device());
  char* memory_local = layout.memory_local != nullptr ? layout.memory_local : ctx.scratch();
  const char* port_local = layout.port_local != nullptr ? layout.port_local : ctx.scratch();
  const size_t port_bytes = layout.port_local != nullptr ? layout.port_local_bytes : ctx.scratch_bytes();
  std::vector<MemoryChannelDeviceHandle> memory(size_t(n) * cpp);
  std::vector<PortChannelDeviceHandle> port(size_t(n) * ppp);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    for (int c = 0; c < cpp; ++c) memory[size_t(p) * cpp + c] = ctx.memory_channel(p, c, memory_local);
    for (int c = 0; c < ppp; ++c) port[size_t(p) * ppp + c] = ctx.port_channel(p, c, port_local, port_bytes);
  }
  const int sb = ctx.stream_blocks(), kinds = RankContext::kStreamKinds;
  std::vector<D2DSemaphoreDeviceHandle> stream(size_t(n) * sb * kinds);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    for (int b = 0; b < sb; ++b)
      for (int k = 0; k < kinds; ++k) stream[(size_t(p) * sb + b) * kinds + k] = ctx.stream_semaphore(p, b, k);
  }
  memory_ = upload(ctx.device(), memory);
  has_port_ = ppp > 0;
  port_per_peer_ = ppp;
  if (has_port_) port_ = upload(ctx.device(), port);
  if (sb > 0) stream_ = upload(ctx.device(), stream);
  if (n <= kMaxSwitchMembers) switch_ = ctx.switch_channel_emulated();
  if (n > 1 && ctx.p2p_layout().usable()) {
    std::vector<P2PPeerHandle> p2p(n);
    for (int p = 0; p < n; ++p)
      if (p != me) p2p[p] = ctx.p2p_peer(p);
    p2p_ = upload(ctx.device(), p2p);
    has_p2p_ = true;
    int blocks = sb;
    if (blocks < 1) JAX_MSCCLPP_CUDA_CHECK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, ctx.device()));
    p2p_blocks_ = blocks < kP2PMaxBlocks ? blocks : kP2PMaxBlocks;
  }
}

CollectiveContext ChannelTables::collective_context(const RankContext& ctx) const {
  CollectiveContext c{};
  c.rank = ctx.rank();
  c.nranks = ctx.nranks();
  c.channels_per_peer = ctx.channels_per_peer();
  c.scratch = ctx.scratch();
  c.scratch_bytes = ctx.scratch_bytes();
  c.mem = memory();
  // The collectives index port channels like memory channels (p * channels_per_peer + c).
  c.port = port_per_peer_ == ctx.channels_per_peer() ? port() : nullptr;
  c.sw = switch_;
  c.stream_blocks = ctx.stream_blocks();
  c.stream_tuning = ctx.stream_tuning();
  c.stream = c.stream_blocks > 0 ? stream_.get<D2DSemaphoreDeviceHandle>() : nullptr;
  c.epoch = ctx.epoch();
  for (int q = 0; q < c.nranks && q < kDirectPeers; ++q) c.peer_scratch[q] = ctx.peer_scratch(q);
  c.p2p = has_p2p_ ? p2p_.get<P2PPeerHandle>() : nullptr;
  c.p2p_layout = ctx.p2p_layout();
  c.p2p_blocks = has_p2p_ ? p2p_blocks_ : 0;
  c.direct = ctx.direct_to_every_peer() ? 1 : 0;
  return c;
}

}  // namespace jax_mscclpp::cuda
