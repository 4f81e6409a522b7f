#include "bootstrap.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <thread>

#include "runtime_settings.h"
#include "tcp.h"

namespace jax_mscclpp::nccl {
namespace {

using tcp::Clock;
using tcp::deadline_from_now;
using tcp::milliseconds_left;
using tcp::receive_all;
using tcp::send_all;

constexpr uint32_t kHelloMagic = 0x4A4D4E42;  // "JMNB"

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t nranks;
  int32_t reserved;
  uint64_t nonce;
};

// A frame is its byte count, then its bytes. A failure (report_failure, and the root's word of it) sets the count's
// top bit, and its bytes are the reason.
constexpr uint64_t kFailureBit = 1ull << 63;

enum class Received { kFrame, kFailure, kNothing };

bool send_frame(int fd, const std::string& bytes, Clock::time_point deadline, bool failure = false) {
  const uint64_t header = bytes.size() | (failure ? kFailureBit : 0);
  return send_all(fd, &header, sizeof(header), deadline) && send_all(fd, bytes.data(), bytes.size(), deadline);
}

// A frame's bytes (at most 64 MiB) and whether it is a failure; kNothing when none came whole.
Received receive_frame(int fd, std::string& bytes, Clock::time_point deadline) {
  uint64_t header = 0;
  if (!receive_all(fd, &header, sizeof(header), deadline)) return Received::kNothing;
  const uint64_t size = header & ~kFailureBit;
  if (size > (64ull << 20)) return Received::kNothing;
  bytes.resize(size);
  if (!receive_all(fd, bytes.data(), size, deadline)) return Received::kNothing;
  return (header & kFailureBit) != 0 ? Received::kFailure : Received::kFrame;
}

// Roots of this process between the first frame of a round and the last answer of it. The root lives in the
// process that made the id, whose rank may have its answer and end (the real NCCL's id round, then exit) while the
// root still answers the others: the process's exit waits for such rounds to be answered, a few seconds at most.
std::atomic<int> roots_in_a_round{0};
struct RoundsAnsweredAtExit {
  ~RoundsAnsweredAtExit() {
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (roots_in_a_round.load(std::memory_order_acquire) > 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
} rounds_answered_at_exit;

// How long an accepted connection may take to say which rank it is (at most the process's timeout): a rank sends
// its hello as soon as it connects, so this bounds only what never speaks.
constexpr double kHelloSeconds = 5.0;

// A connection accepted and not yet identified: its hello's bytes so far, and until when the rest may come.
struct Newcomer {
  int fd;
  Hello hello;
  size_t received;
  Clock::time_point deadline;
};

// Whether a complete hello is one of this root's ranks, consistent with those already in `ranks` (empty before the
// first: it sets the world size).
bool accepted_hello(const Hello& hello, uint64_t nonce, const std::vector<int>& ranks) {
  if (hello.magic != kHelloMagic || hello.nonce != nonce || hello.nranks <= 0 || hello.rank < 0 ||
      hello.rank >= hello.nranks)
    return false;
  if (ranks.empty()) return true;
  return hello.nranks == static_cast<int>(ranks.size()) && ranks[hello.rank] < 0;
}

// The accept phase: every rank's socket in rank order, or none (those that came are closed, failing their rounds)
// when the process's timeout ends first. Connections are served concurrently: one that sends nothing, or part of a hello, holds up no
// other, and is dropped at its own deadline (kHelloSeconds) or when every rank is there; one whose hello is not a
// rank of this root (another nonce or protocol, a world size that differs, a rank already taken) is dropped at once.
std::vector<int> accept_ranks(int listener, uint64_t nonce) {
  std::vector<int> ranks;  // socket per rank, -1 while not connected; empty until the first hello says the size
  int connected = 0;
  std::vector<Newcomer> newcomers;
  const auto deadline = deadline_from_now();
  const auto hello_allowance =
      std::chrono::milliseconds(static_cast<int64_t>(std::min(timeout_seconds(), kHelloSeconds) * 1000.0));
  while (ranks.empty() || connected < static_cast<int>(ranks.size())) {
    auto wake = deadline;
    for (const Newcomer& n : newcomers) wake = std::min(wake, n.deadline);
    std::vector<pollfd> watched{{listener, POLLIN, 0}};
    for (const Newcomer& n : newcomers) watched.push_back({n.fd, POLLIN, 0});
    const int ready = ::poll(watched.data(), watched.size(), milliseconds_left(wake));
    if (ready < 0 && errno != EINTR) break;
    const auto now = Clock::now();
    // The newcomers first (their indices match `watched` from 1), then the listener, which may add one.
    std::vector<Newcomer> still_waiting;
    for (size_t i = 0; i < newcomers.size(); ++i) {
      Newcomer& n = newcomers[i];
      if (ready > 0 && (watched[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t got = ::recv(n.fd, reinterpret_cast<char*>(&n.hello) + n.received, sizeof(Hello) - n.received, 0);
        if (got <= 0 && !(got < 0 && (errno == EINTR || errno == EAGAIN))) {
          ::close(n.fd);
          continue;
        }
        if (got > 0) n.received += static_cast<size_t>(got);
      }
      if (n.received == sizeof(Hello)) {
        if (!accepted_hello(n.hello, nonce, ranks)) {
          ::close(n.fd);
          continue;
        }
        if (ranks.empty()) ranks.assign(n.hello.nranks, -1);
        const int one = 1;
        ::setsockopt(n.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ranks[n.hello.rank] = n.fd;
        ++connected;
        continue;
      }
      if (now >= n.deadline) {
        ::close(n.fd);
        continue;
      }
      still_waiting.push_back(n);
    }
    newcomers.swap(still_waiting);
    if (ready > 0 && (watched[0].revents & POLLIN) != 0) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) newcomers.push_back({fd, Hello{}, 0, now + hello_allowance});
    }
    if (now >= deadline) break;
  }
  for (const Newcomer& n : newcomers) ::close(n.fd);
  if (ranks.empty() || connected < static_cast<int>(ranks.size())) {
    for (int fd : ranks)
      if (fd >= 0) ::close(fd);
    return {};
  }
  return ranks;
}

// Every rank but `failed` hears, in place of the round's frames, that `failed` failed with `reason`; the
// connections that took the word, half closed. Returns those connections.
std::vector<int> announce_failure(const std::vector<int>& ranks, int failed, const std::string& reason) {
  const std::string text =
      "rank " + std::to_string(failed) + " of " + std::to_string(ranks.size()) + " failed: " + reason;
  const auto deadline = deadline_from_now();
  std::vector<int> told;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (r == failed || !send_frame(ranks[r], text, deadline, /*failure=*/true)) continue;
    ::shutdown(ranks[r], SHUT_WR);
    told.push_back(ranks[r]);
  }
  return told;
}

// Reads and drops what `fds` still send until each closes (or the process's timeout): a connection closed with
// bytes unread is reset, which can discard the failure before its rank read it.
void drain_until_closed(const std::vector<int>& fds) {
  const auto deadline = deadline_from_now();
  std::vector<pollfd> open;
  for (int fd : fds) open.push_back({fd, POLLIN, 0});
  char sink[4096];
  while (!open.empty()) {
    const int ready = ::poll(open.data(), open.size(), milliseconds_left(deadline));
    if (ready == 0 || (ready < 0 && errno != EINTR)) break;
    std::vector<pollfd> still;
    for (const pollfd& p : open) {
      const ssize_t got = p.revents == 0 ? 1 : ::recv(p.fd, sink, sizeof(sink), 0);
      if (got > 0 || (got < 0 && errno == EINTR)) still.push_back({p.fd, POLLIN, 0});
    }
    open.swap(still);
  }
}

// The root's thread: accepts the ranks, then serves all-gather rounds until one of them leaves or fails.
void serve(int listener, uint64_t nonce) {
  std::vector<int> ranks = accept_ranks(listener, nonce);
  const int nranks = static_cast<int>(ranks.size());
  ::close(listener);
  bool serving = nranks > 0;
  std::vector<std::string> frames(serving ? nranks : 0);
  while (serving) {
    // A round: every rank's frame (without a deadline for the first, which may come much later), then all to all;
    // a rank's failure in place of its frame ends the round, and the root, with the word of it to the others.
    bool received = true, in_round = false;
    int failed = -1;
    for (int r = 0; r < nranks && received; ++r) {
      const auto round_deadline = r == 0 ? Clock::now() + std::chrono::hours(24 * 365) : deadline_from_now();
      const Received got = receive_frame(ranks[r], frames[r], round_deadline);
      if (r == 0 && got != Received::kNothing) {
        in_round = true;
        roots_in_a_round.fetch_add(1, std::memory_order_acq_rel);
      }
      if (got == Received::kFailure) failed = r;
      received = got == Received::kFrame;
    }
    for (int r = 0; r < nranks && serving && received; ++r) {
      const auto send_deadline = deadline_from_now();
      for (int q = 0; q < nranks && serving; ++q) serving = send_frame(ranks[r], frames[q], send_deadline);
    }
    const std::vector<int> told = failed >= 0 ? announce_failure(ranks, failed, frames[failed]) : std::vector<int>{};
    if (in_round) roots_in_a_round.fetch_sub(1, std::memory_order_acq_rel);
    drain_until_closed(told);
    if (!received) break;
  }
  for (int fd : ranks)
    if (fd >= 0) ::close(fd);
}

}  // namespace

BootstrapAddress start_bootstrap_root() {
  BootstrapAddress address{};
  const int listener = tcp::listen_at_host(&address.ipv4, &address.port, "the communicator's ranks");
  std::random_device entropy;
  address.nonce = (static_cast<uint64_t>(entropy()) << 32) ^ entropy() ^
                  static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  std::thread(serve, listener, address.nonce).detach();
  return address;
}

BootstrapClient::BootstrapClient(const BootstrapAddress& address, int rank, int nranks)
    : nonce_(address.nonce), rank_(rank), nranks_(nranks) {
  const std::string root = tcp::address_text(address.ipv4, address.port);
  const auto deadline = deadline_from_now();
  socket_ = tcp::connect_by(address.ipv4, address.port, deadline);
  if (socket_ < 0) {
    throw std::runtime_error("rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                             " could not reach the communicator's root at " + root + " (JAX_MSCCLPP_TIMEOUT_S)");
  }
  const Hello hello{kHelloMagic, rank, nranks, 0, address.nonce};
  if (!send_all(socket_, &hello, sizeof(hello), deadline)) {
    ::close(socket_);
    throw std::runtime_error("rank " + std::to_string(rank) + " lost the communicator's root at " + root);
  }
}

BootstrapClient::~BootstrapClient() {
  if (socket_ >= 0) ::close(socket_);
}

std::vector<std::string> BootstrapClient::all_gather(const std::string& mine, const char* what) {
  return all_gather(mine, what, timeout_seconds());
}

std::vector<std::string> BootstrapClient::all_gather(const std::string& mine, const char* what, double limit_s) {
  const std::string who = "rank " + std::to_string(rank_) + " of " + std::to_string(nranks_);
  if (failed_.load(std::memory_order_acquire))
    throw std::runtime_error(std::string(what) + ": " + who + " failed earlier in this communicator's setup");
  const auto deadline = tcp::deadline_in(limit_s);
  std::vector<std::string> frames(nranks_);
  Received got = !interrupted_.load(std::memory_order_acquire) && send_frame(socket_, mine, deadline)
                     ? Received::kFrame
                     : Received::kNothing;
  for (int q = 0; got == Received::kFrame && q < nranks_; ++q) {
    got = receive_frame(socket_, frames[q], deadline);
    if (got == Received::kFailure) throw RankFailed(std::string(what) + ": " + frames[q]);
  }
  if (got != Received::kFrame) {
    if (interrupted_.load(std::memory_order_acquire))
      throw std::runtime_error(std::string(what) + ": " + who + " was aborted (ncclCommAbort)");
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g", limit_s);
    throw std::runtime_error(std::string(what) + ": " + who + " did not hear from every rank within " + limit +
                             " s (a rank is missing or gone; JAX_MSCCLPP_TIMEOUT_S)");
  }
  return frames;
}

void BootstrapClient::report_failure(const std::string& reason) {
  if (failed_.exchange(true, std::memory_order_acq_rel) || interrupted_.load(std::memory_order_acquire)) return;
  (void)send_frame(socket_, reason, deadline_from_now(), /*failure=*/true);
}

void BootstrapClient::interrupt() {
  // shutdown (not close): the descriptor stays valid for a thread inside poll or recv on it, which then returns.
  if (!interrupted_.exchange(true, std::memory_order_acq_rel) && socket_ >= 0) ::shutdown(socket_, SHUT_RDWR);
}

}  // namespace jax_mscclpp::nccl
