// Socket helpers of the data plane: marking a flow's socket (DSCP, priority, keepalive), listening,
// resolving hosts, blocking whole writes and reads, and the data-port candidates.
#ifndef GERYON_NATIVE_RENDEZVOUS_SOCKETS_H_
#define GERYON_NATIVE_RENDEZVOUS_SOCKETS_H_

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <set>
#include <string>

namespace geryon {

// The i-th data-port candidate of a task whose first candidate is `first` (its gRPC port + offset).
// A task listens on the first free one; consumers try them in order and the producer's answer to
// the hello says whose port they reached. The stride (a prime) keeps the candidates of tasks with
// adjacent gRPC ports (2222, 2223, ...) apart; wraps within 1024..65535.
int DataPortCandidate(int first, int i);
// Keepalive: a peer silent for kKeepIdleSeconds gets kKeepCount probes kKeepIntervalSeconds apart;
// none answered -> the flow fails (about 10 s in all). The consumer also bounds how long a request
// may wait for its ACK (TCP_USER_TIMEOUT), the producer does not: see MarkSocket.
constexpr int kKeepIdleSeconds = 4;
constexpr int kKeepIntervalSeconds = 2;
constexpr int kKeepCount = 3;
constexpr unsigned int kConsumerUserTimeoutMs = 10000;

std::string ErrnoText(int err);

void MarkSocket(int fd, int cls, bool consumer);

int LocalPort(int fd);

// The numeric address of a sockaddr, IPv4-mapped IPv6 addresses as plain IPv4.
std::string NumericHost(const sockaddr* sa, socklen_t len, int* port);

std::set<std::string> ResolveHost(const std::string& host);

bool WriteAll(int fd, iovec* iov, int iovcnt, std::string* error);

// Reads exactly n bytes; false with `error` set on EOF or a socket error. Unbuffered: for the hello's
// answer, read once per connection before its FrameReader exists (nothing may be read past it).
bool ReadFull(int fd, void* buf, size_t n, std::string* error);

// Listens on `port` (dual-stack, else IPv4): the descriptor, or -1 with `*error`.
int Listen(int port, std::string* error);

template <typename T>
bool Get(int fd, T* v, std::string* error) {
  return ReadFull(fd, v, sizeof(T), error);
}

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_SOCKETS_H_
