#include "harness_rank.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "check.h"
#include "collective_types.h"
#include "ragged_tables.h"

namespace jax_mscclpp::cuda {

HarnessRank::HarnessRank(const RankOptions& opts, size_t input_bytes, size_t output_bytes, bool port_channels)
    : VirtualRank(opts, input_bytes, output_bytes, port_channels) {
  DeviceGuard g(opts.device);
  counters_ = DeviceBuffer(opts.device, kHarnessCounters * sizeof(unsigned long long));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreate(&start_));
  JAX_MSCCLPP_CUDA_CHECK(cudaEventCreate(&stop_));
}

HarnessRank::~HarnessRank() { close(); }

void HarnessRank::release() {
  if (graph_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaGraphExecDestroy(graph_));
  graph_ = nullptr;
  if (start_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaEventDestroy(start_));
  if (stop_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaEventDestroy(stop_));
  start_ = stop_ = nullptr;
  captured_ragged_widths_.clear();
  tables_ = ChannelTables();
  counters_ = DeviceBuffer();
  ragged_tables_ = DeviceBuffer();
  captured_ragged_tables_ = DeviceBuffer();
}

void HarnessRank::built() {
  ChannelTableLayout layout;
  layout.memory_local = input();
  if (port_channels()) {
    layout.port_channels_per_peer = 1;
    layout.port_local = input();
    layout.port_local_bytes = input_bytes();
  }
  tables_ = ChannelTables(gpu().rank_context(), layout);
  ragged_tables_ = DeviceBuffer(device(), ragged_table_stride());
}

RankArgs HarnessRank::args() const {
  const RankContext& ctx = gpu().rank_context();
  RankArgs a{};
  a.rank = rank();
  a.nranks = nranks();
  a.channels_per_peer = ctx.channels_per_peer();
  a.input = input();
  a.output = output();
  a.scratch = ctx.scratch();
  a.input_bytes = input_bytes();
  a.output_bytes = output_bytes();
  a.scratch_bytes = ctx.scratch_bytes();
  a.mem = tables_.memory();
  a.port = tables_.port();
  a.sw = tables_.switch_channel();
  a.epoch = ctx.epoch();
  a.counters = counters_.get<unsigned long long>();
  a.site = ctx.site(-1);
  a.collective = gpu().context();
  return a;
}

void HarnessRank::check_launch(const HarnessParams& p) const {
  if (!is_built()) throw std::runtime_error("jax_mscclpp: build() the rank before launching");
  const auto op = static_cast<HarnessOp>(p.op);
  const bool needs_port =
      op == HarnessOp::kPortExchange || op == HarnessOp::kPortFlushCheck || op == HarnessOp::kPortLatency ||
      (op == HarnessOp::kWaitForever && p.mode == 2);
  if (needs_port && !port_channels())
    throw std::invalid_argument("jax_mscclpp: this rank was built without port channels");
  const bool per_block_channels = op == HarnessOp::kHbExchange || op == HarnessOp::kLlExchange ||
                                  op == HarnessOp::kHbEpochs || op == HarnessOp::kReducePut ||
                                  op == HarnessOp::kSwitchAllReduce;
  if (per_block_channels && p.blocks > gpu().rank_context().channels_per_peer())
    throw std::invalid_argument("jax_mscclpp: more blocks than channels per peer");
  const SwitchChannelDeviceHandle& sw = tables_.switch_channel();
  if (op == HarnessOp::kSwitchAllReduce && sw.members == nullptr && sw.multicast == nullptr)
    throw std::invalid_argument("jax_mscclpp: the rank lacks a SwitchChannel (a world of more than " +
                                std::to_string(kMaxSwitchMembers) + " ranks has none)");
  if (op == HarnessOp::kCollective || op == HarnessOp::kPermute) {
    check_collective(p);
  } else {
    // The collective launchers pick their own grid: blocks and threads 0.
    const bool own_grid = op == HarnessOp::kAllReduce1paLL || op == HarnessOp::kAllReduceEpilogue;
    if (own_grid ? (p.blocks != 0 || p.threads != 0) : (p.blocks < 1 || p.threads < 1 || p.threads > 1024))
      throw std::invalid_argument("jax_mscclpp: bad launch shape");
  }
}

void HarnessRank::launch(const HarnessParams& p) {
  check_launch(p);
  DeviceGuard g(device());
  JAX_MSCCLPP_CUDA_CHECK(
      cudaMemsetAsync(counters_.get(), 0, kHarnessCounters * sizeof(unsigned long long), stream()));
  raise_launch_error(launch_harness(args(), p, stream()));
}

int32_t HarnessRank::call_algorithm(const HarnessParams& p) const {
  check_collective(p);
  return direct_algorithm(gpu().context(), p.collective, p.algorithm, input() + p.src_off, output() + p.dst_off,
                          p.count, p.dtype, p.reduce_op);
}

std::vector<double> HarnessRank::time_call_entry(const std::vector<HarnessRank*>& ranks, const HarnessParams& p,
                                                 int calls, int rounds) {
  if (ranks.empty() || calls < 1 || rounds < 1) throw std::invalid_argument("jax_mscclpp: no ranks, calls or rounds");
  std::vector<CollectiveCall> entries;
  for (HarnessRank* rank : ranks) {
    rank->check_collective(p);
    entries.push_back(CollectiveCall{p.collective, p.algorithm, rank->input() + p.src_off, rank->output() + p.dst_off,
                                     p.count, p.dtype, p.reduce_op, /*max_blocks=*/0, /*plan_id=*/0,
                                     /*peers_reach_buffers=*/true});
  }
  DeviceGuard g(ranks.front()->device());
  std::vector<double> host_us;
  for (int round = -2; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i)
      for (size_t r = 0; r < ranks.size(); ++r)
        if (const CallResult result = ranks[r]->gpu().run(entries[r], ranks[r]->stream()); !result.launched())
          throw std::runtime_error(result.message);
    const auto issued = std::chrono::steady_clock::now();
    for (HarnessRank* rank : ranks) rank->synchronize();
    if (round >= 0)
      host_us.push_back(std::chrono::duration<double, std::micro>(issued - start).count() /
                        (static_cast<double>(calls) * ranks.size()));
  }
  return host_us;
}

void HarnessRank::check_collective(const HarnessParams& p) const {
  const size_t esize = dtype_size(static_cast<DType>(p.dtype));
  if (esize == 0) throw std::invalid_argument("jax_mscclpp: unknown dtype code");
  const size_t block = p.count * esize, n = static_cast<size_t>(nranks());
  const auto c = static_cast<HarnessOp>(p.op) == HarnessOp::kPermute ? Collective::kPermute
                                                                     : static_cast<Collective>(p.collective);
  const size_t in_bytes = block * (c == Collective::kReduceScatter || c == Collective::kAllToAll ? n : 1);
  const size_t out_bytes = block * (c == Collective::kAllGather || c == Collective::kAllToAll ? n : 1);
  if (p.src_off + in_bytes > input_bytes() || p.dst_off + out_bytes > output_bytes())
    throw std::out_of_range("jax_mscclpp: collective input or output outside the rank's buffers");
}

void HarnessRank::raise_launch_error(cudaError_t e) const {
  if (e == cudaErrorInvalidValue)
    throw std::invalid_argument("jax_mscclpp: unknown harness op, collective, algorithm or dtype, or scratch too small");
  if (e == cudaErrorNotReady)
    throw std::invalid_argument("jax_mscclpp: the rank lacks what the algorithm needs (port channels, SwitchChannel)");
  JAX_MSCCLPP_CUDA_CHECK(e);
}

void HarnessRank::capture(const HarnessParams& p) {
  const auto op = static_cast<HarnessOp>(p.op);
  if (op != HarnessOp::kCollective && op != HarnessOp::kPermute)
    throw std::invalid_argument("jax_mscclpp: only collective launches are captured");
  check_launch(p);
  DeviceGuard g(device());
  drop_graph();
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  const cudaError_t launched = launch_harness(args(), p, stream());
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  if (launched != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    raise_launch_error(launched);
  }
  JAX_MSCCLPP_CUDA_CHECK(ended);
  instantiate(graph);
}

void HarnessRank::drop_graph() {
  captured_ragged_widths_.clear();
  if (graph_ == nullptr) return;
  const cudaError_t e = cudaGraphExecDestroy(graph_);
  graph_ = nullptr;
  JAX_MSCCLPP_CUDA_CHECK(e);
}

void HarnessRank::instantiate(cudaGraph_t graph) {
  const cudaError_t inst = cudaGraphInstantiate(&graph_, graph, 0);
  cudaGraphDestroy(graph);
  JAX_MSCCLPP_CUDA_CHECK(inst);
}

std::vector<P2PMessage> HarnessRank::p2p_messages(const std::vector<P2PSpec>& specs) const {
  if (!is_built()) throw std::runtime_error("jax_mscclpp: build() the rank before launching");
  std::vector<P2PMessage> out;
  out.reserve(specs.size());
  for (const auto& [which, offset, bytes, peer, receive] : specs) {
    char* at = which < 0 ? nullptr : buffer(which, offset, bytes);
    out.push_back(P2PMessage{at, bytes, peer, receive});
  }
  return out;
}

cudaError_t HarnessRank::launch_p2p(const std::vector<P2PMessage>& messages) {
  return launch_p2p_group(gpu().context(), messages.data(), static_cast<int>(messages.size()), stream());
}

void HarnessRank::raise_p2p_error(cudaError_t e) const {
  if (e == cudaErrorInvalidValue)
    throw std::invalid_argument("jax_mscclpp: launch_p2p_group refused the group: a peer out of range, more than "
                                "kP2PMaxMessages, unmatched self messages or self sizes that differ");
  if (e == cudaErrorNotReady) throw std::invalid_argument("jax_mscclpp: the rank has no p2p resources");
  JAX_MSCCLPP_CUDA_CHECK(e);
}

void HarnessRank::p2p_group(const std::vector<P2PSpec>& messages) {
  const std::vector<P2PMessage> m = p2p_messages(messages);
  DeviceGuard g(device());
  raise_p2p_error(launch_p2p(m));
}

void HarnessRank::capture_p2p_groups(const std::vector<std::vector<P2PSpec>>& groups) {
  std::vector<std::vector<P2PMessage>> messages;
  for (const auto& group : groups) messages.push_back(p2p_messages(group));
  DeviceGuard g(device());
  drop_graph();
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  cudaError_t launched = cudaSuccess;
  for (const auto& m : messages)
    if (launched == cudaSuccess) launched = launch_p2p(m);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  if (launched != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    raise_p2p_error(launched);
  }
  JAX_MSCCLPP_CUDA_CHECK(ended);
  instantiate(graph);
}

namespace {

// The four tables of one ragged call: nranks entries each, and within int32 where they are written as int32.
void check_ragged_tables(const HarnessRank::RaggedTables& tables, int nranks, int index_bytes) {
  if (nranks > kRaggedTableMaxRanks)
    throw std::invalid_argument("jax_mscclpp: the harness writes ragged_all_to_all tables of at most " +
                                std::to_string(kRaggedTableMaxRanks) + " ranks");
  const auto check = [&](const std::vector<int64_t>& table, const char* name) {
    if (table.size() != static_cast<size_t>(nranks))
      throw std::invalid_argument(std::string("jax_mscclpp: ragged_all_to_all's ") + name + " has " +
                                  std::to_string(table.size()) + " entries, not nranks = " + std::to_string(nranks));
    if (index_bytes != 4) return;
    for (const int64_t v : table)
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        throw std::invalid_argument(std::string("jax_mscclpp: ragged_all_to_all's ") + name + " entry " +
                                    std::to_string(v) + " does not fit int32 (index_bytes 4)");
  };
  check(std::get<0>(tables), "input_offsets");
  check(std::get<1>(tables), "send_sizes");
  check(std::get<2>(tables), "output_offsets");
  check(std::get<3>(tables), "recv_sizes");
}

HarnessRank::RaggedTables tables_of(const HarnessRank::RaggedSpec& call) {
  return {std::get<5>(call), std::get<6>(call), std::get<7>(call), std::get<8>(call)};
}

// Bytes of one table entry as the harness writes it (collective.h: 4 or 8; any other width goes to the launcher as
// given, which refuses it).
size_t table_width(int index_bytes) { return index_bytes == 4 ? 4 : 8; }

}  // namespace

size_t HarnessRank::ragged_table_stride() const { return 4 * static_cast<size_t>(nranks()) * sizeof(int64_t); }

RaggedAllToAll HarnessRank::ragged_call(const RaggedSpec& call) const {
  if (!is_built()) throw std::runtime_error("jax_mscclpp: build() the rank before launching");
  const auto& [operand_offset, operand_rows, output_offset, output_rows, row_bytes, in_off, send, out_off, recv,
               index_bytes] = call;
  check_ragged_tables(tables_of(call), nranks(), index_bytes);
  const uint64_t most = std::numeric_limits<uint64_t>::max();
  if (row_bytes != 0 && (operand_rows > most / row_bytes || output_rows > most / row_bytes))
    throw std::out_of_range("jax_mscclpp: ragged_all_to_all rows of row_bytes overflow 64 bits");
  RaggedAllToAll c{};
  c.operand = buffer(kInput, operand_offset, operand_rows * row_bytes);
  c.operand_rows = operand_rows;
  c.output = buffer(kOutput, output_offset, output_rows * row_bytes);
  c.output_rows = output_rows;
  c.row_bytes = row_bytes;
  c.index_bytes = index_bytes;
  return c;
}

void HarnessRank::write_ragged_tables(const RaggedTables& tables, int index_bytes, char* at) {
  RaggedTableValues v{};
  const int n = nranks();
  const std::vector<int64_t>* t[4] = {&std::get<0>(tables), &std::get<1>(tables), &std::get<2>(tables),
                                      &std::get<3>(tables)};
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < n; ++i) v.values[k * n + i] = (*t[k])[i];
  v.count = 4 * n;
  v.width = static_cast<int32_t>(table_width(index_bytes));
  JAX_MSCCLPP_CUDA_CHECK(::jax_mscclpp::write_ragged_tables(v, at, stream()));
}

RaggedAllToAll HarnessRank::with_tables(RaggedAllToAll call, char* at) const {
  const size_t table = static_cast<size_t>(nranks()) * table_width(call.index_bytes);
  call.input_offsets = at;
  call.send_sizes = at + table;
  call.output_offsets = at + 2 * table;
  call.recv_sizes = at + 3 * table;
  return call;
}

cudaError_t HarnessRank::launch_ragged(const RaggedAllToAll& call) {
  CollectiveContext ctx = gpu().context();
  if (gpu().rank_context().config().stops_on_failure())
    ctx.failed_outputs = {rank_failed_word(ctx), {static_cast<char*>(call.output), nullptr},
                          {call.output_rows * call.row_bytes, 0}};
  return launch_ragged_all_to_all(ctx, call, stream());
}

void HarnessRank::raise_ragged_error(cudaError_t e) const {
  if (e == cudaErrorInvalidValue)
    throw std::invalid_argument("jax_mscclpp: launch_ragged_all_to_all refused the call: null tables, an index width "
                                "other than 4 or 8, row_bytes 0, or null buffers with rows");
  if (e == cudaErrorNotReady)
    throw std::invalid_argument("jax_mscclpp: launch_ragged_all_to_all: the rank has no p2p resources (or slots "
                                "under 32 bytes)");
  JAX_MSCCLPP_CUDA_CHECK(e);
}

void HarnessRank::ragged_all_to_all(const RaggedSpec& call) {
  const RaggedAllToAll c = ragged_call(call);
  DeviceGuard g(device());
  write_ragged_tables(tables_of(call), c.index_bytes, ragged_tables_.get());
  raise_ragged_error(launch_ragged(with_tables(c, ragged_tables_.get())));
}

void HarnessRank::capture_ragged_all_to_all(const std::vector<RaggedSpec>& calls) {
  if (calls.empty()) throw std::invalid_argument("jax_mscclpp: no ragged_all_to_all call to capture");
  std::vector<RaggedAllToAll> cs;
  for (const auto& call : calls) cs.push_back(ragged_call(call));
  DeviceGuard g(device());
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream()));  // a replay may still read the capture's tables
  drop_graph();
  const size_t stride = ragged_table_stride();
  if (captured_ragged_tables_.bytes() < calls.size() * stride) {
    captured_ragged_tables_ = DeviceBuffer();
    captured_ragged_tables_ = DeviceBuffer(device(), calls.size() * stride);
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    char* at = captured_ragged_tables_.get() + i * stride;
    write_ragged_tables(tables_of(calls[i]), cs[i].index_bytes, at);
    cs[i] = with_tables(cs[i], at);
  }
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the tables are in before the capture begins
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  cudaError_t launched = cudaSuccess;
  for (const auto& c : cs)
    if (launched == cudaSuccess) launched = launch_ragged(c);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  if (launched != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    raise_ragged_error(launched);
  }
  JAX_MSCCLPP_CUDA_CHECK(ended);
  instantiate(graph);
  for (const auto& c : cs) captured_ragged_widths_.push_back(c.index_bytes);
}

void HarnessRank::set_captured_ragged_tables(const std::vector<RaggedTables>& tables) {
  if (captured_ragged_widths_.empty()) throw std::runtime_error("jax_mscclpp: no ragged_all_to_all calls captured");
  if (tables.size() != captured_ragged_widths_.size())
    throw std::invalid_argument("jax_mscclpp: " + std::to_string(tables.size()) + " tables for " +
                                std::to_string(captured_ragged_widths_.size()) + " captured ragged calls");
  for (size_t i = 0; i < tables.size(); ++i) check_ragged_tables(tables[i], nranks(), captured_ragged_widths_[i]);
  DeviceGuard g(device());
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream()));
  for (size_t i = 0; i < tables.size(); ++i)
    write_ragged_tables(tables[i], captured_ragged_widths_[i],
                        captured_ragged_tables_.get() + i * ragged_table_stride());
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void HarnessRank::replay(int times) {
  if (graph_ == nullptr) throw std::runtime_error("jax_mscclpp: nothing captured");
  DeviceGuard g(device());
  for (int i = 0; i < times; ++i) JAX_MSCCLPP_CUDA_CHECK(cudaGraphLaunch(graph_, stream()));
}

std::vector<uint64_t> HarnessRank::counters() {
  std::vector<uint64_t> out(kHarnessCounters);
  DeviceGuard g(device());
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(out.data(), counters_.get(), out.size() * sizeof(uint64_t),
                                         cudaMemcpyDeviceToHost, stream()));
  JAX_MSCCLPP_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return out;
}

void HarnessRank::record_start() { JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(start_, stream())); }
void HarnessRank::record_stop() { JAX_MSCCLPP_CUDA_CHECK(cudaEventRecord(stop_, stream())); }
float HarnessRank::elapsed_ms() {
  JAX_MSCCLPP_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  JAX_MSCCLPP_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

float HarnessRank::time_memcpy(size_t bytes, int iters) {
  if (bytes > input_bytes() || bytes > output_bytes())
    throw std::out_of_range("jax_mscclpp: size over the buffers");
  DeviceGuard g(device());
  JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(output(), input(), bytes, cudaMemcpyDeviceToDevice, stream()));
  record_start();
  for (int i = 0; i < iters; ++i)
    JAX_MSCCLPP_CUDA_CHECK(cudaMemcpyAsync(output(), input(), bytes, cudaMemcpyDeviceToDevice, stream()));
  record_stop();
  return elapsed_ms() / static_cast<float>(iters);
}

}  // namespace jax_mscclpp::cuda
