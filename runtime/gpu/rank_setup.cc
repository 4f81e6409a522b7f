#include "rank_setup.h"

#include <unistd.h>

#include <stdexcept>

#include "byte_frame.h"
#include "jax_mscclpp/codes.h"

namespace jax_mscclpp::cuda {

GpuIdentity local_gpu_identity(int device, cudaError_t* error) {
  GpuIdentity mine;
  mine.host = this_host_identity();
  mine.process = this_process_identity();
  cudaDeviceProp properties{};
  const cudaError_t queried = device >= 0 ? cudaGetDeviceProperties(&properties, device) : cudaErrorInvalidDevice;
  if (queried == cudaSuccess) {
    mine.gpu_uuid.assign(reinterpret_cast<const char*>(&properties.uuid), sizeof(properties.uuid));
    mine.gpu_name = properties.name;
  } else {
    (void)cudaGetLastError();
  }
  if (error != nullptr) *error = queried;
  return mine;
}

ConnectedRanks connect_all(const std::vector<LocalRank>& local, Exchange& exchange, const std::string& agreement,
                           const AgreementCheck& check) {
  ConnectedRanks connected;
  std::map<int, std::string> agreements, endpoints;
  // 1. Every local rank's frame.
  for (const LocalRank& l : local) {
    const GpuIdentity identity = local_gpu_identity(l.rank->rank_context().device());
    FrameWriter frame;
    write_gpu_identity(frame, identity);
    frame.text(agreement).text(l.rank->endpoint());
    exchange.publish(l.index, frame.bytes());
    connected.identities[l.index] = identity;
    agreements[l.index] = agreement;
    endpoints[l.index] = l.rank->endpoint();
  }
  // 2. Every peer's, once per rank however many local ranks share it.
  for (const LocalRank& l : local) {
    for (const int q : l.group) {
      if (endpoints.count(q)) continue;
      const std::string bytes = exchange.fetch(q);
      FrameReader in(bytes);
      GpuIdentity decoded;
      if (!read_gpu_identity(in, &decoded) || !in.text(&agreements[q]) ||
          !in.text(&endpoints[q]) || !in.at_end())
        throw std::runtime_error("rank " + std::to_string(q) + " sent no setup frame this library reads (a different "
                                 "version of jax_mscclpp?)");
      connected.identities[q] = decoded;
    }
  }
  // 3. What the ranks must agree on.
  if (check) check(agreements);
  // 4. Shared GPUs.
  std::vector<GpuIdentity> met;
  for (const auto& [q, identity] : connected.identities) met.push_back(identity);
  connected.shares_gpu = share_a_gpu(met);
  // 5. Channels.
  for (const LocalRank& l : local) {
    for (const int q : l.group)
      if (q != l.index) l.rank->connect(q, endpoints[q]);
    l.rank->finalize(codes::placement_of(connected.shares_gpu));
  }
  return connected;
}

}  // namespace jax_mscclpp::cuda
