// The TCP plumbing of the library's rendezvous (bootstrap.h) and mailbox (mailbox.h): bounded waits on a socket,
// whole sends and receives, listening on a port of the system's choice, this host's address. Every wait ends by a
// deadline (the process's timeout, runtime_settings.h, unless the caller names another).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace jax_mscclpp::nccl::tcp {

using Clock = std::chrono::steady_clock;

// Milliseconds from now until `deadline` (0 when past), as poll takes them.
int milliseconds_left(Clock::time_point deadline);
// Now plus the process's timeout (JAX_MSCCLPP_TIMEOUT_S).
Clock::time_point deadline_from_now();
// Now plus `seconds`.
Clock::time_point deadline_in(double seconds);

// Waits for `events` (poll's) on `fd` until `deadline`: true when ready, false on timeout or error.
bool wait_for(int fd, short events, Clock::time_point deadline);
// All of `bytes` sent, or all received, by `deadline`; false otherwise (a closed peer included).
bool send_all(int fd, const void* data, size_t bytes, Clock::time_point deadline);
bool receive_all(int fd, void* data, size_t bytes, Clock::time_point deadline);

// A socket listening on every interface, on a port of the system's choice, and the address other processes reach
// it at (*ipv4: host_address; *port; network byte order). Throws std::runtime_error naming `what` when none can be
// opened.
int listen_at_host(uint32_t* ipv4, uint16_t* port, const char* what);
// A connection to `ipv4`:`port` (network byte order), retried until `deadline`; -1 when none was made.
int connect_by(uint32_t ipv4, uint16_t port, Clock::time_point deadline);
// "a.b.c.d:port" of an address in network byte order.
std::string address_text(uint32_t ipv4, uint16_t port);

// The address other processes reach this host at: JAX_MSCCLPP_NCCL_BOOTSTRAP_ADDRESS (an IPv4 address) if set,
// else this host's first IPv4 address that is not loopback, else 127.0.0.1; network byte order. Throws
// std::runtime_error when the setting is not an IPv4 address.
uint32_t host_address();

}  // namespace jax_mscclpp::nccl::tcp
