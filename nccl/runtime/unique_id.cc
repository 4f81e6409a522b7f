#include "unique_id.h"

#include <cstdint>
#include <cstring>

namespace jax_mscclpp::nccl {
namespace {

constexpr uint64_t kOurUniqueIdMagic = 0x4449'5155'4353'4D4AULL;  // bytes "JMSCUQID" in memory order
constexpr uint32_t kLayoutVersion = 1;

}  // namespace

ncclUniqueId encode_unique_id(const BootstrapAddress& root) {
  ncclUniqueId id{};
  char* b = id.internal;
  std::memcpy(b + 0, &kOurUniqueIdMagic, 8);
  std::memcpy(b + 8, &kLayoutVersion, 4);
  std::memcpy(b + 12, &root.ipv4, 4);
  std::memcpy(b + 16, &root.port, 2);
  std::memcpy(b + 24, &root.nonce, 8);
  return id;
}

std::optional<BootstrapAddress> decode_unique_id(const ncclUniqueId& id) {
  const char* b = id.internal;
  uint64_t magic = 0;
  uint32_t version = 0;
  std::memcpy(&magic, b, 8);
  std::memcpy(&version, b + 8, 4);
  if (magic != kOurUniqueIdMagic || version != kLayoutVersion) return std::nullopt;
  BootstrapAddress root{};
  std::memcpy(&root.ipv4, b + 12, 4);
  std::memcpy(&root.port, b + 16, 2);
  std::memcpy(&root.nonce, b + 24, 8);
  return root;
}

}  // namespace jax_mscclpp::nccl
