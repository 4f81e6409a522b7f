#include "registry.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

namespace jax_mscclpp {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<int64_t, std::shared_ptr<host::HostCommunicator>>& host_registry() {
  static std::map<int64_t, std::shared_ptr<host::HostCommunicator>> r;
  return r;
}

double initial_timeout() {
  const char* env = std::getenv("JAX_MSCCLPP_TIMEOUT_S");
  if (env) {
    char* end = nullptr;
    double v = std::strtod(env, &end);
    if (end != env && v > 0) return v;
  }
  return 300.0;
}
std::atomic<double> g_timeout_s{initial_timeout()};

}  // namespace

void register_host_communicator(std::shared_ptr<host::HostCommunicator> comm) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  host_registry()[comm->id()] = std::move(comm);
}

std::shared_ptr<host::HostCommunicator> find_host_communicator(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = host_registry().find(id);
  return it == host_registry().end() ? nullptr : it->second;
}

bool destroy_communicator(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return host_registry().erase(id) > 0;
}

std::vector<int64_t> live_communicators() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<int64_t> ids;
  for (auto& [id, _] : host_registry()) ids.push_back(id);
  return ids;
}

double timeout_seconds() { return g_timeout_s.load(std::memory_order_relaxed); }
void set_timeout_seconds(double seconds) { g_timeout_s.store(seconds, std::memory_order_relaxed); }

}  // namespace jax_mscclpp
