#include "registry.h"

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

}  // namespace jax_mscclpp
