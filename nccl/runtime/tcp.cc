#include "tcp.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "jax_mscclpp/settings.h"
#include "runtime_settings.h"

namespace jax_mscclpp::nccl::tcp {

int milliseconds_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : (left > 1 << 30 ? 1 << 30 : static_cast<int>(left));
}

Clock::time_point deadline_in(double seconds) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

Clock::time_point deadline_from_now() { return deadline_in(timeout_seconds()); }

bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, milliseconds_left(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool send_all(int fd, const void* data, size_t bytes, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    if (!wait_for(fd, POLLOUT, deadline)) return false;
    const ssize_t sent = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    bytes -= static_cast<size_t>(sent);
  }
  return true;
}

bool receive_all(int fd, void* data, size_t bytes, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (!wait_for(fd, POLLIN, deadline)) return false;
    const ssize_t got = ::recv(fd, p, bytes, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

int listen_at_host(uint32_t* ipv4, uint16_t* port, const char* what) {
  *ipv4 = host_address();
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = 0;
  socklen_t length = sizeof(any);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 || ::listen(listener, 1024) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&any), &length) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listener);
    throw std::runtime_error(std::string("cannot listen for ") + what + ": " + why);
  }
  *port = any.sin_port;
  return listener;
}

int connect_by(uint32_t ipv4, uint16_t port, Clock::time_point deadline) {
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = ipv4;
    to.sin_port = port;
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    if (fd >= 0) ::close(fd);
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string address_text(uint32_t ipv4, uint16_t port) {
  char text[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &ipv4, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(port));
}

uint32_t host_address() {
  if (const char* forced = setting_value(Setting::kNcclBootstrapAddress)) {
    in_addr a{};
    if (inet_pton(AF_INET, forced, &a) != 1) {
      throw std::runtime_error(std::string("JAX_MSCCLPP_NCCL_BOOTSTRAP_ADDRESS=") + forced +
                               " is not an IPv4 address");
    }
    return a.s_addr;
  }
  uint32_t found = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      const uint32_t a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      if ((ntohl(a) >> 24) == 127) continue;
      found = a;
      break;
    }
    freeifaddrs(list);
  }
  return found;
}

}  // namespace jax_mscclpp::nccl::tcp
