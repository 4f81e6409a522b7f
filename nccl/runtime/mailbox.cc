#include "mailbox.h"

#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "tcp.h"

namespace jax_mscclpp::nccl {
namespace {

constexpr uint32_t kLetterMagic = 0x4A4D4D42;  // "JMMB"
constexpr uint64_t kMaxPart = 1 << 20;          // a key's or a letter's bytes at most
constexpr double kConnectionSeconds = 5.0;      // how long one connection may take to hand its letter over

struct LetterHeader {
  uint32_t magic;
  uint32_t reserved;
  uint64_t key_bytes;
  uint64_t letter_bytes;
};

struct Mailbox {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::string, std::string> letters;
};

Mailbox& mailbox() {
  static Mailbox* box = new Mailbox;  // never freed: its thread serves until the process ends
  return *box;
}

// One connection's letter into the mailbox, then the answer that it is there.
void take_letter(int fd) {
  const auto deadline = tcp::deadline_in(kConnectionSeconds);
  LetterHeader header{};
  if (!tcp::receive_all(fd, &header, sizeof(header), deadline) || header.magic != kLetterMagic ||
      header.key_bytes > kMaxPart || header.letter_bytes > kMaxPart)
    return;
  std::string key(header.key_bytes, '\0'), letter(header.letter_bytes, '\0');
  if (!tcp::receive_all(fd, key.data(), key.size(), deadline) ||
      !tcp::receive_all(fd, letter.data(), letter.size(), deadline))
    return;
  Mailbox& box = mailbox();
  {
    std::lock_guard<std::mutex> lock(box.mutex);
    box.letters[key] = std::move(letter);
  }
  box.arrived.notify_all();
  const char stored = 1;
  (void)tcp::send_all(fd, &stored, 1, deadline);
}

// Each connection on a thread of its own (letters are rare: a shrink's), so that one that says nothing holds up
// no other.
void serve(int listener) {
  while (true) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    try {
      std::thread([fd] {
        take_letter(fd);
        ::close(fd);
      }).detach();
    } catch (const std::system_error&) {
      ::close(fd);  // no thread to be had: the sender's delivery fails and says so
    }
  }
}

}  // namespace

MailboxAddress process_mailbox() {
  static const MailboxAddress address = [] {
    MailboxAddress a{};
    const int listener = tcp::listen_at_host(&a.ipv4, &a.port, "this process's mailbox");
    std::thread(serve, listener).detach();
    return a;
  }();
  return address;
}

void deliver(const MailboxAddress& to, const std::string& key, const std::string& letter, double limit_s) {
  const auto deadline = tcp::deadline_in(limit_s);
  const std::string where = "the mailbox at " + tcp::address_text(to.ipv4, to.port);
  const int fd = tcp::connect_by(to.ipv4, to.port, deadline);
  if (fd < 0) throw std::runtime_error("could not reach " + where);
  const LetterHeader header{kLetterMagic, 0, key.size(), letter.size()};
  char stored = 0;
  const bool done = tcp::send_all(fd, &header, sizeof(header), deadline) &&
                    tcp::send_all(fd, key.data(), key.size(), deadline) &&
                    tcp::send_all(fd, letter.data(), letter.size(), deadline) &&
                    tcp::receive_all(fd, &stored, 1, deadline) && stored == 1;
  ::close(fd);
  if (!done) throw std::runtime_error(where + " did not take a letter");
}

std::string collect(const std::string& key, double limit_s, const std::string& what) {
  Mailbox& box = mailbox();
  std::unique_lock<std::mutex> lock(box.mutex);
  const auto deadline = tcp::deadline_in(limit_s);
  if (!box.arrived.wait_until(lock, deadline, [&] { return box.letters.count(key) != 0; }))
    throw std::runtime_error(what + " did not come within " + std::to_string(static_cast<int>(limit_s)) +
                             " s (JAX_MSCCLPP_TIMEOUT_S)");
  const auto found = box.letters.find(key);
  std::string letter = std::move(found->second);
  box.letters.erase(found);
  return letter;
}

std::string encode_mailbox_address(const MailboxAddress& address) {
  std::string bytes(sizeof(address.ipv4) + sizeof(address.port), '\0');
  std::memcpy(bytes.data(), &address.ipv4, sizeof(address.ipv4));
  std::memcpy(bytes.data() + sizeof(address.ipv4), &address.port, sizeof(address.port));
  return bytes;
}

bool decode_mailbox_address(const std::string& bytes, MailboxAddress* address) {
  if (bytes.size() != sizeof(address->ipv4) + sizeof(address->port)) return false;
  std::memcpy(&address->ipv4, bytes.data(), sizeof(address->ipv4));
  std::memcpy(&address->port, bytes.data() + sizeof(address->ipv4), sizeof(address->port));
  return true;
}

}  // namespace jax_mscclpp::nccl
