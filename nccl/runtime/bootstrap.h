// The rendezvous of one communicator's ranks, over TCP: what our unique id (unique_id.h) points at.
//
// The process that makes an id (ncclGetUniqueId) starts a root: a listening socket and one thread serving it. Every
// rank of the communicator connects to the root (BootstrapClient), says which rank it is, and then takes part in
// rounds of all-gather: in round k every rank sends one frame of bytes, and once all have, the root sends every rank
// all frames in rank order. The root serves the connections it accepts at once: one that never says which rank it
// is, or says something else, is dropped without holding up the ranks. Every rank must make the same sequence of
// all_gather calls (setup, splits, the barrier before destruction); a rank that sends none within the process's
// timeout (runtime_settings.h) fails every rank's pending all_gather with an error naming the ranks missing. A rank
// whose own work fails (a setup step after which the others would go on without it) says so with report_failure: its
// failure takes the place of its frame in the round the root is serving, and every rank's all_gather of that round
// (or, for a rank not yet in it, its next) throws RankFailed naming the failed rank and its reason. The root's thread
// ends when any rank disconnects or fails, or a round times out; it holds no state another communicator shares.
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace jax_mscclpp::nccl {

struct BootstrapAddress {
  uint32_t ipv4;   // network byte order
  uint16_t port;   // network byte order
  uint64_t nonce;  // random, per root: a connection carrying another is refused
};

// Starts a root for a communicator of ranks yet unknown (each rank says the world size when it connects; they must
// agree), at this host's address (tcp.h, host_address). Throws std::runtime_error when no socket can be opened.
BootstrapAddress start_bootstrap_root();

// What all_gather throws when a rank reported a failure (report_failure): "rank R of N failed: reason".
struct RankFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class BootstrapClient {
 public:
  // Connects to the root at `address` as `rank` of `nranks`; throws std::runtime_error (naming the root and rank)
  // when the root cannot be reached within the timeout.
  BootstrapClient(const BootstrapAddress& address, int rank, int nranks);
  ~BootstrapClient();
  BootstrapClient(const BootstrapClient&) = delete;
  BootstrapClient& operator=(const BootstrapClient&) = delete;

  // The nonce of the root this client met: the same on every rank of the communicator, and no other's.
  uint64_t nonce() const { return nonce_; }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // One round: every rank's frame, in rank order (this rank's own included). Throws std::runtime_error when the
  // root or a rank does not answer within the timeout, naming `what`. One thread at a time: a round's frames share
  // the one connection, and the rounds of every rank pair up by their order.
  std::vector<std::string> all_gather(const std::string& mine, const char* what);
  // The same round bounded by `limit_s` seconds instead of the process's timeout (a destroy's barrier).
  std::vector<std::string> all_gather(const std::string& mine, const char* what, double limit_s);
  // Tells every other rank that this one failed, with `reason`, and ends this rank's part (later rounds fail). Does
  // not wait for the others; best effort where the root is already gone.
  void report_failure(const std::string& reason);
  // Ends this rank's connection to the root now, from any thread: a round in progress on another thread fails at
  // once, later rounds fail, and the root ends (so every other rank's pending round fails too). Idempotent.
  void interrupt();

 private:
  int socket_ = -1;
  uint64_t nonce_;
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> failed_{false};  // report_failure was called
  int rank_;
  int nranks_;
};

}  // namespace jax_mscclpp::nccl
