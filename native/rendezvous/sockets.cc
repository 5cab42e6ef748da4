// Socket helpers (sockets.h).
#include "sockets.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "connection_limits.h"  // kListenBacklog
#include "frame_reader.h"  // RecvExact
#include "transport.h"  // DscpForClass, PriorityForClass

namespace geryon {

// The i-th data-port candidate of a task whose first candidate is `first` (its gRPC port + offset).
// A task listens on the first free one; consumers try them in order and the producer's answer to
// the hello says whose port they reached. The stride (a prime) keeps the candidates of tasks with
// adjacent gRPC ports (2222, 2223, ...) apart; wraps within 1024..65535.
int DataPortCandidate(int first, int i) {
  constexpr int kStride = 1009, kLow = 1024, kSpan = 65536 - 1024;
  return kLow + ((first - kLow + i * kStride) % kSpan + kSpan) % kSpan;
}

std::string ErrnoText(int err) { return std::string(strerror(err)); }

void MarkSocket(int fd, int cls, bool consumer) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int tos = DscpForClass(cls) << 2;
  // Dual-stack sockets carrying IPv4 use IP_TOS, native IPv6 ones IPV6_TCLASS: set both.
  setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
  setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos));
  int prio = PriorityForClass(cls);
  setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio));
  // Dead peers are found by silence, not by how long the tensor bytes wait for their ACKs. Under
  // strict priority, a PFC pause or incast backoff, a low class may legitimately wait many seconds
  // for its ACKs; TCP_USER_TIMEOUT on the producer (5 s until issue 16) killed such live flows, and
  // the consumer's error named a healthy PS as dead. So:
  // - both ends: keepalive. It probes only after nothing at all arrived from the peer for
  //   kKeepIdleSeconds, and any byte from the peer (data, ACK, probe answer from its kernel) resets
  //   it; no answer to kKeepCount probes kKeepIntervalSeconds apart -> dead (about 10 s of silence).
  // - the producer (the bulk sender): no TCP_USER_TIMEOUT at all, so its responses may wait for
  //   ACKs as long as priority makes them wait.
  // - the consumer: TCP_USER_TIMEOUT kConsumerUserTimeoutMs. Linux suspends keepalive probes while
  //   sent data is unacknowledged (tcp_keepalive_timer, net/ipv4/tcp_timer.c), and a consumer
  //   almost always has a request in flight when its peer's host vanishes; without a bound it would
  //   wait for tcp_retries2 (about 15 min). A request is acknowledged by any segment from the
  //   producer (every data segment carries the cumulative ACK), so this too fires only after about
  //   10 s in which nothing at all came from the producer: the same bound as keepalive (Linux then
  //   also ends an unanswered keepalive at this timeout instead of after kKeepCount probes).
  // Limit: a class starved of every byte from the producer for 10 s cannot be told from a dead host.
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = kKeepIdleSeconds, interval = kKeepIntervalSeconds, count = kKeepCount;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  unsigned int user_timeout_ms = consumer ? kConsumerUserTimeoutMs : 0;  // 0: the kernel's default, off
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

int LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

// The numeric address of a sockaddr, IPv4-mapped IPv6 addresses as plain IPv4.
std::string NumericHost(const sockaddr* sa, socklen_t len, int* port) {
  char host[NI_MAXHOST] = {0};
  char serv[NI_MAXSERV] = {0};
  if (getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "";
  }
  if (port != nullptr) *port = atoi(serv);
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos) h = h.substr(7);
  return h;
}

std::set<std::string> ResolveHost(const std::string& host) {
  std::set<std::string> out;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    std::string h = NumericHost(ai->ai_addr, ai->ai_addrlen, nullptr);
    if (!h.empty()) out.insert(h);
  }
  freeaddrinfo(res);
  return out;
}

bool WriteAll(int fd, iovec* iov, int iovcnt, std::string* error) {
  while (iovcnt > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt;
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = ErrnoText(errno);
      return false;
    }
    size_t left = static_cast<size_t>(n);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

// Reads exactly n bytes; false with `error` set on EOF or a socket error. Unbuffered: for the hello's
// answer, read once per connection before its FrameReader exists (nothing may be read past it).
bool ReadFull(int fd, void* buf, size_t n, std::string* error) { return RecvExact(fd, buf, n, error); }

int Listen(int port, std::string* error) {
  // Dual-stack first (IPv4 peers arrive as mapped addresses), plain IPv4 where IPv6 is off.
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1, zero = 0;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && listen(fd, kListenBacklog) == 0) return fd;
    *error = ErrnoText(errno);
    close(fd);
    if (*error != strerror(EAFNOSUPPORT) && *error != strerror(EADDRNOTAVAIL)) return -1;
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = ErrnoText(errno);
    return -1;
  }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && listen(fd, kListenBacklog) == 0) return fd;
  *error = ErrnoText(errno);
  close(fd);
  return -1;
}

}  // namespace geryon
