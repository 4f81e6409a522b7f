#include "communicator.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "check.h"

namespace jax_mscclpp::cuda {

GpuRank::GpuRank(const RankOptions& options, bool port_channels)
    : ctx_(std::make_unique<RankContext>(options)), port_channels_(port_channels) {}

void GpuRank::finalize() {
  const int n = ctx_->nranks(), cpp = ctx_->channels_per_peer(), me = ctx_->rank(), sb = ctx_->stream_blocks();
  std::vector<MemoryChannelDeviceHandle> mem(size_t(n) * cpp);
  std::vector<PortChannelDeviceHandle> port(port_channels_ ? size_t(n) * cpp : 0);
  std::vector<D2DSemaphoreDeviceHandle> stream(size_t(n) * sb * RankContext::kStreamKinds);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    for (int c = 0; c < cpp; ++c) {
      mem[size_t(p) * cpp + c] = ctx_->memory_channel(p, c, ctx_->scratch());
      if (port_channels_) port[size_t(p) * cpp + c] = ctx_->port_channel(p, c, ctx_->scratch(), ctx_->scratch_bytes());
    }
    for (int b = 0; b < sb; ++b)
      for (int k = 0; k < RankContext::kStreamKinds; ++k)
        stream[(size_t(p) * sb + b) * RankContext::kStreamKinds + k] = ctx_->stream_semaphore(p, b, k);
  }
  DeviceGuard guard(ctx_->device());
  auto upload = [](DeviceBuffer& buf, int device, const auto& v) {
    buf = DeviceBuffer(device, v.size() * sizeof(v[0]) + 1);
    JAX_MSCCLPP_CUDA_CHECK(cudaMemcpy(buf.get(), v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice));
  };
  upload(memory_channels_, ctx_->device(), mem);
  if (port_channels_) upload(port_channel_handles_, ctx_->device(), port);
  upload(stream_semaphores_, ctx_->device(), stream);
  device_ = CollectiveContext{};
  device_.rank = me;
  device_.nranks = n;
  device_.channels_per_peer = cpp;
  device_.stream_blocks = sb;
  device_.scratch = ctx_->scratch();
  device_.scratch_bytes = ctx_->scratch_bytes();
  device_.mem = memory_channels_.get<MemoryChannelDeviceHandle>();
  device_.port = port_channels_ ? port_channel_handles_.get<PortChannelDeviceHandle>() : nullptr;
  device_.stream = sb > 0 ? stream_semaphores_.get<D2DSemaphoreDeviceHandle>() : nullptr;
  // A group larger than a SwitchChannel's members has none: 2PA-NVLS is refused there (collective.cu).
  if (n <= kMaxSwitchMembers) device_.sw = ctx_->switch_channel_emulated();
  device_.epoch = ctx_->epoch();
  for (int q = 0; q < n && q < kDirectPeers; ++q) device_.peer_scratch[q] = ctx_->peer_scratch(q);
  ready_ = true;
}

void GpuRank::bind_plan(int64_t plan_id, std::shared_ptr<const host::HostPlan> plan) {
  if (!ready_) throw std::runtime_error("jax_mscclpp: bind a plan to a GPU rank after finalize()");
  std::lock_guard<std::mutex> lock(plans_mutex_);
  if (plans_.count(plan_id)) return;
  const std::string what = "jax_mscclpp: plan '" + plan->name + "'";
  if (plan->world_size != ctx_->nranks())
    throw std::invalid_argument(what + " is for " + std::to_string(plan->world_size) + " ranks; the communicator has " +
                                std::to_string(ctx_->nranks()));
  plan_channel_indices(*plan);  // throws, naming the endpoint, when channel ends do not pair up
  const int needed = ExecutorPlan::channels_per_peer(*plan);
  if (needed > ctx_->channels_per_peer())
    throw std::invalid_argument(what + " needs " + std::to_string(needed) +
                                " channels per peer; the communicator's ranks have " +
                                std::to_string(ctx_->channels_per_peer()));
  if (ExecutorPlan::uses_port_channels(*plan) && !port_channels_)
    throw std::invalid_argument(what + " uses port channels; create the communicator with port channels "
                                "(jax_mscclpp.Communicator(mesh, axes, port_channels=True)) before its first use");
  DeviceGuard guard(ctx_->device());
  plans_[plan_id] = std::make_unique<ExecutorPlan>(std::move(plan), *ctx_, device_);
}

const ExecutorPlan* GpuRank::plan(int64_t plan_id) const {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  auto it = plans_.find(plan_id);
  return it == plans_.end() ? nullptr : it->second.get();
}

GpuCommunicator::GpuCommunicator(int64_t id) : id_(id), watchdog_([this] { watch(); }) {}

GpuCommunicator::~GpuCommunicator() {
  stop_.store(true);
  if (watchdog_.joinable()) watchdog_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [device, rank] : ranks_) {
    // No kernel of ours may still touch what is freed next.
    JAX_MSCCLPP_CUDA_IGNORE(cudaSetDevice(device));
    JAX_MSCCLPP_CUDA_IGNORE(cudaDeviceSynchronize());
  }
  ranks_.clear();
}

std::string GpuCommunicator::create_rank(int device, const RankOptions& options, bool port_channels) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ranks_.count(device)) throw std::invalid_argument("jax_mscclpp: this communicator already has a rank on that device");
  auto rank = std::make_unique<GpuRank>(options, port_channels);
  std::string endpoint = rank->endpoint();
  ranks_[device] = std::move(rank);
  return endpoint;
}

GpuRank* GpuCommunicator::rank(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranks_.find(device);
  return it == ranks_.end() ? nullptr : it->second.get();
}

std::vector<std::string> GpuCommunicator::errors() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (auto& [device, rank] : ranks_) {
    std::string msg = rank->rank_context().config().error_message();
    if (!msg.empty()) out.push_back("jax_mscclpp: communicator " + std::to_string(id_) + ": " + msg);
  }
  return out;
}

void GpuCommunicator::watch() {
  bool reported = false;
  while (!stop_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (reported) continue;
    for (const std::string& msg : errors()) {
      std::fprintf(stderr, "%s\n", msg.c_str());
      reported = true;
    }
  }
}

namespace {
std::mutex registry_mutex;
std::map<int64_t, std::shared_ptr<GpuCommunicator>> registry;
}  // namespace

std::shared_ptr<GpuCommunicator> create_gpu_communicator(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& slot = registry[id];
  if (!slot) slot = std::make_shared<GpuCommunicator>(id);
  return slot;
}

std::shared_ptr<GpuCommunicator> find_gpu_communicator(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry.find(id);
  return it == registry.end() ? nullptr : it->second;
}

bool destroy_gpu_communicator(int64_t id) {
  std::shared_ptr<GpuCommunicator> comm;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = registry.find(id);
    if (it == registry.end()) return false;
    comm = std::move(it->second);
    registry.erase(it);
  }
  return true;  // freed here, outside the lock, once no handler holds it
}

}  // namespace jax_mscclpp::cuda
