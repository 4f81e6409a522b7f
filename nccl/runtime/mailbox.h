// This process's mailbox: letters that a rank of another process (or of this one) delivers to it by key, for a
// rendezvous that cannot go through a communicator's bootstrap because some of its ranks are gone (ncclCommShrink:
// the survivors' leader delivers the new communicator's id to each survivor; our_runtime.cc).
//
// Contracts:
//   - The mailbox opens at the first process_mailbox() (a listening socket on a port of the system's choice and
//     one thread serving it for the process's life) and stays open; its address is what a rank hands its peers in
//     its communicator's last setup round (runtime_communicator.h), so that any of them can write to it later.
//   - deliver() connects, sends (key, letter) and returns once the mailbox holds the letter (it answers after
//     storing), or throws std::runtime_error naming the address. Each connection is served on a thread of its own,
//     bounded by a few seconds; one that is not a letter is dropped.
//   - collect() waits for the letter of `key` (one delivered before the call counts), takes it out of the mailbox
//     and returns it; throws std::runtime_error naming `what` when none comes within `limit_s` seconds. A key is
//     delivered once and collected once; keys name what they are for, and a letter nobody collects stays.
#pragma once

#include <cstdint>
#include <string>

namespace jax_mscclpp::nccl {

struct MailboxAddress {
  uint32_t ipv4;  // network byte order
  uint16_t port;  // network byte order
};

MailboxAddress process_mailbox();
void deliver(const MailboxAddress& to, const std::string& key, const std::string& letter, double limit_s);
std::string collect(const std::string& key, double limit_s, const std::string& what);

// The address as bytes (in a setup frame), and back; decode is false for bytes that are not one.
std::string encode_mailbox_address(const MailboxAddress& address);
bool decode_mailbox_address(const std::string& bytes, MailboxAddress* address);

}  // namespace jax_mscclpp::nccl
