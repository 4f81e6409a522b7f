// Execution plans (jax_mscclpp/dsl/PLAN.md) in their host form: what every backend reads of a plan.
//
// Python lowers a DSL program to a plan and encodes it (jax_mscclpp/plan_encoding.py) as plain integers: per rank, a
// list of channel endpoints and, per thread block, a stream of operations. HostPlan::decode reads and checks that
// encoding once; the reference backend interprets the result (runtime/reference/host_executor.h) and the GPU host
// runtime builds the executor's program images from it (runtime/gpu/executor_plan.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective_types.h"

namespace jax_mscclpp::host {

// The codes of the integer encoding (kernels/include/jax_mscclpp/codes.def): buffers, channel types, operations.
enum class PlanBuffer : int32_t {
#define JAX_MSCCLPP_PLAN_BUFFER(enumerator, code, name) enumerator = code,
#include "jax_mscclpp/codes.def"
};
enum class PlanChannelType : int32_t {
#define JAX_MSCCLPP_PLAN_CHANNEL(enumerator, code, name) enumerator = code,
#include "jax_mscclpp/codes.def"
};
enum class PlanOpCode : int32_t {
#define JAX_MSCCLPP_PLAN_OP(enumerator, code, name) enumerator = code,
#include "jax_mscclpp/codes.def"
};

// The op table's name of an operation code ("?" for a code it does not list).
inline const char* plan_op_name(PlanOpCode code) {
  switch (code) {
#define JAX_MSCCLPP_PLAN_OP(enumerator, code, name) \
  case PlanOpCode::enumerator:                     \
    return name;
#include "jax_mscclpp/codes.def"
  }
  return "?";
}

// Whether `code` is an operation code of the encoding.
inline bool is_plan_op(int32_t code) {
  switch (code) {
#define JAX_MSCCLPP_PLAN_OP(enumerator, value, name) case value:
#include "jax_mscclpp/codes.def"
    return true;
  }
  return false;
}

struct ChunkRef {
  PlanBuffer buffer = PlanBuffer::kNone;
  int32_t index = 0;
  int32_t count = 0;
};

struct ChannelRef {  // a remote chunk or packet slot reached through one of the rank's channels
  int32_t channel = -1;
  ChunkRef chunk;
};

struct PlanOp {
  PlanOpCode code;
  int32_t channel = -1;
  ChunkRef dst, src;
  std::vector<ChunkRef> srcs;
  std::vector<ChannelRef> packet_srcs, remotes;
};

struct PlanChannel {
  PlanChannelType type;
  int32_t peer = -1, peer_channel = -1;  // memory / port
  std::vector<int32_t> members;          // switch: the member ranks, in reduction order
};

struct PlanRank {
  std::vector<PlanChannel> channels;
  std::vector<std::vector<PlanOp>> threadblocks;
};

struct HostPlan {
  std::string name;
  Collective collective;
  int world_size = 0;
  int input_blocks = 1, output_blocks = 1, chunks_per_block = 1, scratch_chunks = 0;
  bool packets = false;
  std::vector<PlanRank> ranks;

  // Decodes the integer encoding; throws std::invalid_argument naming what is malformed.
  static std::shared_ptr<const HostPlan> decode(std::string name, int collective, int world_size,
                                                std::vector<int32_t> geometry,
                                                std::vector<std::vector<std::vector<int32_t>>> channels,
                                                std::vector<std::vector<std::vector<int32_t>>> threadblocks);
};

}  // namespace jax_mscclpp::host
