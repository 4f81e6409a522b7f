#include "host_plan.h"

#include <stdexcept>

namespace jax_mscclpp::host {
namespace {

// Reads the integer encoding of one operation (jax_mscclpp/plans.py):
//   code, channel, n_srcs, n_packet_srcs, n_remotes, dst(3), src(3), srcs(3 each), packet_srcs(4 each),
//   remotes(4 each); a chunk is (buffer, index, count) with buffer -1 for none.
class OpReader {
 public:
  explicit OpReader(const std::vector<int32_t>& words) : w_(words) {}
  bool done() const { return i_ >= w_.size(); }
  PlanOp next() {
    PlanOp op;
    int32_t code = take();
    if (!is_plan_op(code)) throw std::invalid_argument("unknown op code");
    op.code = PlanOpCode(code);
    op.channel = take();
    const int n_srcs = take(), n_packet = take(), n_remotes = take();
    if (n_srcs < 0 || n_packet < 0 || n_remotes < 0) throw std::invalid_argument("negative operand count");
    op.dst = chunk();
    op.src = chunk();
    for (int k = 0; k < n_srcs; ++k) op.srcs.push_back(chunk());
    for (int k = 0; k < n_packet; ++k) op.packet_srcs.push_back(ChannelRef{take(), chunk()});
    for (int k = 0; k < n_remotes; ++k) op.remotes.push_back(ChannelRef{take(), chunk()});
    return op;
  }

 private:
  int32_t take() {
    if (i_ >= w_.size()) throw std::invalid_argument("truncated operation");
    return w_[i_++];
  }
  ChunkRef chunk() {
    ChunkRef c;
    int32_t b = take();
    if (b < -1 || b > 2) throw std::invalid_argument("unknown buffer code");
    c.buffer = PlanBuffer(b);
    c.index = take();
    c.count = take();
    return c;
  }
  const std::vector<int32_t>& w_;
  size_t i_ = 0;
};

}  // namespace

std::shared_ptr<const HostPlan> HostPlan::decode(std::string name, int collective, int world_size,
                                                 std::vector<int32_t> geometry,
                                                 std::vector<std::vector<std::vector<int32_t>>> channels,
                                                 std::vector<std::vector<std::vector<int32_t>>> threadblocks) {
  auto plan = std::make_shared<HostPlan>();
  plan->name = std::move(name);
  plan->collective = Collective(collective);
  plan->world_size = world_size;
  if (geometry.size() != 5) throw std::invalid_argument("geometry is (input blocks, output blocks, chunks, scratch, packets)");
  plan->input_blocks = geometry[0];
  plan->output_blocks = geometry[1];
  plan->chunks_per_block = geometry[2];
  plan->scratch_chunks = geometry[3];
  plan->packets = geometry[4] != 0;
  if (plan->input_blocks < 1 || plan->output_blocks < 1 || plan->chunks_per_block < 1 || plan->scratch_chunks < 0)
    throw std::invalid_argument("bad buffer geometry");
  if (int(channels.size()) != world_size || int(threadblocks.size()) != world_size)
    throw std::invalid_argument("one channel list and one thread block list per rank are needed");
  plan->ranks.resize(world_size);
  for (int r = 0; r < world_size; ++r) {
    for (const auto& c : channels[r]) {
      // (type, peer, peer_channel, member...)
      if (c.size() < 3) throw std::invalid_argument("channel encoding too short");
      PlanChannel ch{PlanChannelType(c[0]), c[1], c[2], {}};
      if (ch.type == PlanChannelType::kSwitch) {
        ch.members.assign(c.begin() + 3, c.end());
        for (int m : ch.members)
          if (m < 0 || m >= world_size) throw std::invalid_argument("switch member out of range");
      } else if (ch.peer < 0 || ch.peer >= world_size) {
        throw std::invalid_argument("channel peer out of range");
      }
      plan->ranks[r].channels.push_back(std::move(ch));
    }
    for (const auto& words : threadblocks[r]) {
      std::vector<PlanOp> ops;
      OpReader reader(words);
      while (!reader.done()) ops.push_back(reader.next());
      for (const PlanOp& op : ops) {
        auto in_range = [&](int c) { return c >= 0 && c < int(plan->ranks[r].channels.size()); };
        bool uses_channel = op.code != PlanOpCode::kCopy && op.code != PlanOpCode::kReduce &&
                            op.code != PlanOpCode::kBarrier && op.code != PlanOpCode::kReducePut &&
                            op.code != PlanOpCode::kReducePackets;
        if (uses_channel && !in_range(op.channel)) throw std::invalid_argument("operation channel out of range");
        for (const auto& ref : op.packet_srcs)
          if (!in_range(ref.channel)) throw std::invalid_argument("packet source channel out of range");
        for (const auto& ref : op.remotes)
          if (!in_range(ref.channel)) throw std::invalid_argument("remote channel out of range");
      }
      plan->ranks[r].threadblocks.push_back(std::move(ops));
    }
  }
  return plan;
}

}  // namespace jax_mscclpp::host
