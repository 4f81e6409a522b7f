#include "communicator.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "check.h"
#include "runtime_settings.h"

namespace jax_mscclpp::cuda {
namespace {
// A proxy trigger that took this long means the proxy thread was blocked (ProxyService::longest_trigger_seconds).
constexpr double kStalledProxySeconds = 1.0;
}  // namespace

GpuRank::GpuRank(const RankOptions& options, bool port_channels)
    : ctx_(std::make_unique<RankContext>(options)), port_channels_(port_channels), order_(options.device) {}

void GpuRank::finalize(int32_t placement) {
  tables_ = ChannelTables(*ctx_, collective_channel_layout(*ctx_, port_channels_));
  device_ = tables_.collective_context(*ctx_);
  device_.placement = placement;
  ready_ = true;
}

void GpuRank::bind_plan(int64_t plan_id, std::shared_ptr<const host::HostPlan> plan, int threads) {
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
  auto bound = std::make_unique<ExecutorPlan>(std::move(plan), *ctx_, device_, threads);
  // A launch's blocks wait for each other (and for peers'), so all of them must be resident at once.
  const DevicePlan& d = bound->device_plan();
  if (const int holds = plan_resident_blocks_for_every_call(d); holds > 0 && d.n_threadblocks > holds)
    throw std::invalid_argument(what + " runs " + std::to_string(d.n_threadblocks) + " thread blocks a rank; GPU " +
                                std::to_string(ctx_->device()) + " holds at most " + std::to_string(holds) +
                                " of them at once, and they wait for each other, so every one must be resident "
                                "(fewer instances or thread blocks)");
  plans_[plan_id] = std::move(bound);
}

std::string GpuRank::plan_name(uint32_t fingerprint) const {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  for (const auto& [id, plan] : plans_)
    if (plan->device_plan().fingerprint == fingerprint) return plan->plan().name;
  return {};
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

GpuRank& GpuCommunicator::create_rank(int device, const RankOptions& options, bool port_channels) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ranks_.count(device)) throw std::invalid_argument("jax_mscclpp: this communicator already has a rank on that device");
  auto& rank = ranks_[device] = std::make_unique<GpuRank>(options, port_channels);
  return *rank;
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
    GpuRank* r = rank.get();
    std::string msg = r->rank_context().config().error_message([r](uint32_t f) { return r->plan_name(f); });
    // A proxy blocked for seconds explains a timeout better than the wait that saw it.
    if (!msg.empty())
      out.push_back("jax_mscclpp: communicator " + std::to_string(id_) + ": " + msg +
                    ProxyService::stalled_proxies(kStalledProxySeconds));
  }
  return out;
}

bool GpuCommunicator::stopped_on_failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [device, rank] : ranks_)
    if (rank->rank_context().config().stopped_on_failure()) return true;
  return false;
}

void GpuCommunicator::set_timeout_seconds(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [device, rank] : ranks_) rank->rank_context().config().set_timeout_seconds(seconds);
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

void apply_timeout_to_gpu_communicators() {
  const double seconds = timeout_seconds();
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto& [id, comm] : registry) comm->set_timeout_seconds(seconds);
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
