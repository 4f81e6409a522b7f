#include "runtime_config.h"

#include <atomic>
#include <cstdio>
#include <cstring>

#include "call_signature.h"
#include "check.h"
#include "collectives/epilogue.h"
#include "runtime_settings.h"

namespace jax_mscclpp::cuda {

namespace {

const char* op_name(uint32_t op) {
  switch (static_cast<WaitOp>(op)) {
    case WaitOp::kSemaphoreWait: return "semaphore wait (MemoryChannel::wait)";
    case WaitOp::kRelaxedSemaphoreWait: return "relaxed semaphore wait (MemoryChannel::relaxed_wait)";
    case WaitOp::kHostSemaphoreWait: return "proxy semaphore wait (PortChannel::wait)";
    case WaitOp::kPacketRead: return "LL packet read";
    case WaitOp::kFifoPush: return "proxy FIFO push (FIFO full)";
    case WaitOp::kFifoSync: return "proxy FIFO sync (flush)";
    case WaitOp::kUser: return "collective wait";
    case WaitOp::kCallCheck: return "call check (the peer's call words of this launch)";
    case WaitOp::kP2PData: return "point-to-point receive (the peer's next chunk, launch_p2p_group)";
    case WaitOp::kP2PCredit: return "point-to-point send (the peer's credit for a slot, launch_p2p_group)";
    case WaitOp::kRaggedPosted: return "ragged all-to-all send (the peer posting its output, direct exchange)";
    case WaitOp::kRaggedWritten: return "ragged all-to-all receive (the peer's lanes writing its rows, direct exchange)";
    default: return "wait";
  }
}

uint64_t to_ns(double s) { return static_cast<uint64_t>(s * 1e9); }

// A launch's call words (jax_mscclpp/call_inbox.cuh) as the host's call signatures word them:
// "all_reduce(sum) of 1024 float32 per block, algorithm 1pa_ll".
std::string describe_call(const CallWords& words, const PlanNames& plan_name) {
  const host::CallSignature s = host::CallSignature::from_words(words.call, words.count);
  const uint32_t variant = words.variant;
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", variant);
  if (variant & kCallPlan) {
    const std::string name = plan_name ? plan_name(variant) : std::string();
    return host::describe(s, name.empty() ? "#" + std::string(hex) : name);  // unknown here: its fingerprint
  }
  std::string out = host::describe(s);
  if (variant & kCallEpilogue)
    out += std::string(" with the fused epilogue ") + epilogue_name(Epilogue(variant >> 24 & 0x3f)) + " (rows of " +
           std::to_string(variant & 0xffffff) + ")";
  return out;
}

// "; rank r was in <call> (launch epoch e), peer p's latest call is <call> (launch epoch f)" for a wait's record
// (or "peer p has posted no call"), with the mismatch advice where both calls are of one epoch and differ; "" where
// the rank posted no call (a primitive kernel, or no inbox).
std::string calls_clause(const ErrorRecord& rec, const PlanNames& plan_name) {
  if (rec.mine_epoch == 0) return {};
  std::string msg = "; rank " + std::to_string(rec.rank) + " was in " + describe_call(rec.mine, plan_name) +
                    " (launch epoch " + std::to_string(rec.mine_epoch) + ")";
  if (rec.theirs_epoch == 0) return msg + ", peer " + std::to_string(rec.peer) + " has posted no call";
  msg += ", peer " + std::to_string(rec.peer) + "'s latest call is " + describe_call(rec.theirs, plan_name) +
         " (launch epoch " + std::to_string(rec.theirs_epoch) + ")";
  const bool same = rec.mine.call == rec.theirs.call && rec.mine.count == rec.theirs.count &&
                    rec.mine.variant == rec.theirs.variant;
  if (rec.mine_epoch == rec.theirs_epoch && !same)
    msg += std::string(": mismatched collective calls; ") + host::kSameCallsAdvice;
  return msg;
}

}  // namespace

std::string describe_error(const ErrorRecord& rec, uint64_t timeout_ns, const PlanNames& plan_name) {
  if (rec.valid == 0) return {};
  const std::string mine = describe_call(rec.mine, plan_name), theirs = describe_call(rec.theirs, plan_name);
  const std::string same_calls = std::string("; ") + host::kSameCallsAdvice;
  if (static_cast<WaitOp>(rec.op) == WaitOp::kCallMismatch) {
    std::string msg = "jax_mscclpp: mismatched collective calls: rank " + std::to_string(rec.rank) + " called " +
                      mine + " (launch epoch " + std::to_string(rec.mine_epoch) + ") but peer " +
                      std::to_string(rec.peer) + " called " + theirs;
    if (rec.theirs_epoch != rec.mine_epoch)
      msg += " (already at launch epoch " + std::to_string(rec.theirs_epoch) + ")";
    return msg + same_calls;
  }
  if (static_cast<WaitOp>(rec.op) == WaitOp::kRaggedBounds) {
    return "jax_mscclpp: ragged_all_to_all on rank " + std::to_string(rec.rank) + ": the " +
           std::to_string(static_cast<int64_t>(rec.observed)) + " rows from row " +
           std::to_string(static_cast<int64_t>(rec.epoch)) + " exchanged with peer " + std::to_string(rec.peer) +
           " are not inside the operand (input_offsets, send_sizes) or the output (output_offsets, recv_sizes), or a "
           "size or offset is negative; the call's outputs are not valid";
  }
  if (static_cast<WaitOp>(rec.op) == WaitOp::kRaggedSizes) {
    return "jax_mscclpp: ragged_all_to_all on rank " + std::to_string(rec.rank) + ": peer " +
           std::to_string(rec.peer) + " sent " + std::to_string(static_cast<int64_t>(rec.epoch)) +
           " rows but recv_sizes[" + std::to_string(rec.peer) + "] is " +
           std::to_string(static_cast<int64_t>(rec.observed)) +
           " (every rank's send_sizes[j] must equal rank j's recv_sizes of it); the call's outputs are not valid";
  }
  if (static_cast<WaitOp>(rec.op) == WaitOp::kPeerFailed) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "jax_mscclpp: rank %d stopped after %.3f s in %s (waiting for %llu, last saw %llu) because rank %d "
                  "failed the communicator on mismatched collective calls",
                  rec.rank, static_cast<double>(rec.waited_ns) * 1e-9, op_name(rec.interrupted_op),
                  static_cast<unsigned long long>(rec.epoch), static_cast<unsigned long long>(rec.observed),
                  rec.peer);
    std::string msg = buf;
    if (rec.mine_epoch != 0)
      msg += "; rank " + std::to_string(rec.rank) + " was in " + mine + " (launch epoch " +
             std::to_string(rec.mine_epoch) + ")";
    if (rec.theirs_epoch != 0)
      msg += ", rank " + std::to_string(rec.peer) + "'s latest call is " + theirs + " (launch epoch " +
             std::to_string(rec.theirs_epoch) + ")";
    return msg + same_calls;
  }
  char buf[512];
  const double waited = static_cast<double>(rec.waited_ns) * 1e-9;
  const double limit = static_cast<double>(timeout_ns == 0 ? kDefaultTimeoutNs : timeout_ns) * 1e-9;
  std::string peer = rec.peer >= 0 ? "peer " + std::to_string(rec.peer) : std::string("the proxy");
  std::snprintf(buf, sizeof(buf),
                "jax_mscclpp: rank %d timed out after %.3f s (limit %.3f s, JAX_MSCCLPP_TIMEOUT_S) in %s on %s: "
                "waited for %llu (epoch/flag/position), last saw %llu [block %d, thread %d]",
                rec.rank, waited, limit, op_name(rec.op), peer.c_str(), static_cast<unsigned long long>(rec.epoch),
                static_cast<unsigned long long>(rec.observed), rec.block, rec.thread);
  return buf + calls_clause(rec, plan_name);
}

std::string describe_late(const ErrorRecord& rec, uint64_t timeout_ns, const PlanNames& plan_name) {
  if (rec.valid == 0) return {};
  char buf[512];
  const double limit = static_cast<double>(timeout_ns == 0 ? kDefaultTimeoutNs : timeout_ns) * 1e-9;
  const std::string peer = rec.peer >= 0 ? "peer " + std::to_string(rec.peer) : std::string("the proxy");
  std::snprintf(buf, sizeof(buf),
                "jax_mscclpp: rank %d has waited %.3f s for %s in %s, past its timeout of %g s "
                "(JAX_MSCCLPP_TIMEOUT_S): waiting for %llu (epoch/flag/position), last saw %llu [block %d, thread %d]",
                rec.rank, static_cast<double>(rec.waited_ns) * 1e-9, peer.c_str(), op_name(rec.op), limit,
                static_cast<unsigned long long>(rec.epoch), static_cast<unsigned long long>(rec.observed), rec.block,
                rec.thread);
  return buf + calls_clause(rec, plan_name);
}

RuntimeConfigHost::RuntimeConfigHost(int rank, double timeout_s, bool stop_on_failure, TimeoutPolicy on_timeout)
    : rank_(rank) {
  void* p = nullptr;
  JAX_MSCCLPP_CUDA_CHECK(cudaHostAlloc(&p, sizeof(RuntimeConfig), cudaHostAllocMapped | cudaHostAllocPortable));
  host_ = static_cast<RuntimeConfig*>(p);
  std::memset(host_, 0, sizeof(RuntimeConfig));
  void* d = nullptr;
  cudaError_t e = cudaHostGetDevicePointer(&d, p, 0);
  if (e != cudaSuccess) {
    cudaFreeHost(p);
    JAX_MSCCLPP_CUDA_CHECK(e);
  }
  device_ = static_cast<RuntimeConfig*>(d);
  host_->stop_on_failure = stop_on_failure ? 1u : 0u;
  host_->on_timeout = static_cast<uint32_t>(on_timeout);
  set_timeout_seconds(timeout_s > 0 ? timeout_s : jax_mscclpp::timeout_seconds());
}

RuntimeConfigHost::~RuntimeConfigHost() {
  if (host_ != nullptr) JAX_MSCCLPP_CUDA_IGNORE(cudaFreeHost(host_));
}

double RuntimeConfigHost::timeout_seconds() const {
  return static_cast<double>(reinterpret_cast<volatile uint64_t*>(&host_->timeout_ns)[0]) * 1e-9;
}

void RuntimeConfigHost::set_timeout_seconds(double s) {
  reinterpret_cast<volatile uint64_t*>(&host_->timeout_ns)[0] = to_ns(s);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void RuntimeConfigHost::set_call_inbox(const char* inbox) {
  reinterpret_cast<const char* volatile*>(&host_->call_inbox)[0] = inbox;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void RuntimeConfigHost::stop_on_failure_now() {
  reinterpret_cast<volatile uint32_t*>(&host_->stop_on_failure)[0] = 1u;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool RuntimeConfigHost::has_error() const { return reinterpret_cast<volatile uint32_t*>(&host_->error.valid)[0] != 0; }

WaitOp RuntimeConfigHost::failure_op() const {
  if (!has_error()) return WaitOp::kNone;
  std::atomic_thread_fence(std::memory_order_acquire);
  return static_cast<WaitOp>(reinterpret_cast<volatile uint32_t*>(&host_->error.op)[0]);
}

std::string RuntimeConfigHost::error_message(const PlanNames& plan_name) const {
  if (!has_error()) return {};
  std::atomic_thread_fence(std::memory_order_acquire);
  ErrorRecord rec;
  std::memcpy(&rec, const_cast<const ErrorRecord*>(&host_->error), sizeof(rec));
  return describe_error(rec, host_->timeout_ns, plan_name);
}

TimeoutPolicy RuntimeConfigHost::timeout_policy() const {
  return static_cast<TimeoutPolicy>(reinterpret_cast<volatile uint32_t*>(&host_->on_timeout)[0]);
}

std::string RuntimeConfigHost::take_late_report(const PlanNames& plan_name) {
  std::lock_guard<std::mutex> lock(late_mutex_);
  LateReport* late = &host_->late;
  if (reinterpret_cast<volatile uint32_t*>(&late->wait.valid)[0] == 0) return {};
  std::atomic_thread_fence(std::memory_order_acquire);
  ErrorRecord rec;
  std::memcpy(&rec, const_cast<const ErrorRecord*>(&late->wait), sizeof(rec));
  const std::string message = describe_late(rec, host_->timeout_ns, plan_name);
  // Re-armed: valid first, so that a wait that claims it next publishes a whole record again (LateReport).
  reinterpret_cast<volatile uint32_t*>(&late->wait.valid)[0] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  reinterpret_cast<volatile uint32_t*>(&late->wait.claimed)[0] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return message;
}

void RuntimeConfigHost::clear_error() {
  std::memset(&host_->error, 0, sizeof(ErrorRecord));
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace jax_mscclpp::cuda
