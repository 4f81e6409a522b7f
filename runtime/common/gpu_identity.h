// Where a rank runs, as every rank of a setup tells the others (runtime/gpu/rank_setup.h; the NCCL library's identity
// round, nccl/runtime/rank_identity.h), and the one rule for ranks that share a GPU. No CUDA here: the GPU's fields
// are filled where it is queried (rank_setup.h, local_gpu_identity).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "byte_frame.h"

namespace jax_mscclpp {

// The host (this_host_identity), the process (this_process_identity), and the GPU: its UUID (16 bytes; "" without
// one) and its name.
struct GpuIdentity {
  std::string host;
  int64_t process = 0;
  std::string gpu_uuid;
  std::string gpu_name;
};

// NCCL_HOSTID where set, else the host name followed by /proc/sys/kernel/random/boot_id (NVIDIA's NCCL's rule, so
// that both libraries see the same hosts; tests set NCCL_HOSTID to put processes of one machine on different hosts).
inline std::string this_host_identity() {
  if (const char* forced = std::getenv("NCCL_HOSTID"); forced != nullptr && forced[0] != '\0') return forced;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return std::string(name) + boot_id;
}

// This process among the processes of its host, for telling whether two ranks (or a memory handle and its reader)
// are of one process: its id and its PID namespace (/proc/self/ns/pid), hashed together as NVIDIA's NCCL does, since
// processes of two containers on one host may have the same id. Equal in every call of one process; not a pid.
inline int64_t this_process_identity() {
  char space[128] = {};
  const ssize_t length = readlink("/proc/self/ns/pid", space, sizeof(space) - 1);
  const std::string key = std::to_string(getpid()) + "/" + (length > 0 ? std::string(space, length) : std::string());
  return static_cast<int64_t>(std::hash<std::string>{}(key) & 0x7fffffffffffffffull);
}

// Whether two of `ranks` drive one physical GPU: the same host and GPU UUID (processes sharing a device, where
// NVIDIA's NCCL refuses to run). Ranks without a GPU share nothing.
inline bool share_a_gpu(const std::vector<GpuIdentity>& ranks) {
  for (size_t q = 0; q < ranks.size(); ++q)
    for (size_t p = q + 1; p < ranks.size(); ++p)
      if (!ranks[q].gpu_uuid.empty() && ranks[q].gpu_uuid == ranks[p].gpu_uuid && ranks[q].host == ranks[p].host)
        return true;
  return false;
}

inline void write_gpu_identity(FrameWriter& out, const GpuIdentity& identity) {
  out.text(identity.host).i64(identity.process).text(identity.gpu_uuid).text(identity.gpu_name);
}

// False when what follows in `in` is not an identity.
inline bool read_gpu_identity(FrameReader& in, GpuIdentity* identity) {
  return in.text(&identity->host) && in.i64(&identity->process) && in.text(&identity->gpu_uuid) &&
         in.text(&identity->gpu_name);
}

}  // namespace jax_mscclpp
