// The device tables of one rank's channels to every peer: what a CollectiveContext (kernels/collectives/
// collective.h) points at. The one place where channel handles are built and uploaded, for the communicators of
// the JAX path (communicator.h) and for the test harness alike.
//
// Layout: memory[p * per_peer + c] and port[p * per_peer + c], c < per_peer, for every peer p (the entries of the
// rank itself stay zero). The SwitchChannel is the emulated one over every rank's scratch when the world has at
// most kMaxSwitchMembers ranks; a larger world has none (members and multicast null), and what needs one
// (2PA-NVLS, plans with switch channels) is refused at launch with cudaErrorNotReady.
// The point-to-point engine's table (launch_p2p_group) has one P2PPeerHandle per peer when the rank has p2p slots
// (RankContext::p2p_layout), else none (launch_p2p_group refuses with cudaErrorNotReady); its launches use at most
// min(stream blocks, or the multiprocessors where there are none, kP2PMaxBlocks) blocks.
#pragma once

#include <cstddef>

#include "collectives/collective.h"
#include "memory.h"
#include "rank_context.h"

namespace jax_mscclpp::cuda {

struct ChannelTableLayout {
  // The buffer offset-based MemoryChannel puts read from (and gets write to); null: the rank's scratch.
  char* memory_local = nullptr;
  // PortChannels per peer; 0: none. They register with the process's proxy service.
  int port_channels_per_peer = 0;
  // The PortChannels' local buffer (what the proxy copies from); null: the rank's scratch.
  const char* port_local = nullptr;
  size_t port_local_bytes = 0;
};

// What the JAX path's communicators and the collectives need: channels_per_peer memory channels per peer reading
// from the scratch, and as many port channels over the scratch when asked for.
ChannelTableLayout collective_channel_layout(const RankContext& ctx, bool port_channels);

class ChannelTables {
 public:
  ChannelTables() = default;
  // Needs every peer of `ctx` connected. Uploads the tables to ctx's device (synchronously).
  ChannelTables(RankContext& ctx, const ChannelTableLayout& layout);

  const MemoryChannelDeviceHandle* memory() const { return memory_.get<MemoryChannelDeviceHandle>(); }
  // Null without port channels.
  const PortChannelDeviceHandle* port() const { return has_port_ ? port_.get<PortChannelDeviceHandle>() : nullptr; }
  int port_channels_per_peer() const { return port_per_peer_; }
  const SwitchChannelDeviceHandle& switch_channel() const { return switch_; }

  // ctx's CollectiveContext over these tables (valid while both live).
  CollectiveContext collective_context(const RankContext& ctx) const;

 private:
  DeviceBuffer memory_, port_, stream_;  // stream_: the streaming kernels' semaphores (collectives/stream.cuh)
  DeviceBuffer p2p_;                     // the point-to-point engine's peer table (collectives/p2p_layout.h)
  bool has_p2p_ = false;
  int p2p_blocks_ = 0;
  bool has_port_ = false;
  int port_per_peer_ = 0;
  SwitchChannelDeviceHandle switch_{};
};

}  // namespace jax_mscclpp::cuda
