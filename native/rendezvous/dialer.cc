// Connecting a consumer flow (tcp_transport.h): the lazy connect on a thread of the transport, the
// data-port candidates, the hello and its answer, retries with backoff, the fail-fast window.
#include "tcp_transport.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "absl/strings/str_cat.h"
#include "flow_counters.h"
#include "settings.h"
#include "sockets.h"
#include "wire_format.h"

namespace geryon {

std::shared_ptr<ClientConn> TcpTransport::Connection(const std::string& peer_task, int cls,
    const std::shared_ptr<PendingRecv>& p, int64_t step_id, const std::string& key, absl::Status* status) {
  // The common case (the flow is up) copies no task entry and builds no string: the host (a short
  // address, kept inline by std::string) and port are compared with the ones dialed.
  Slot* slot;
  std::string host;
  int data_port;
  {
    MutexLock l(view_mu_);
    auto it = view_.tasks.find(peer_task);
    if (it == view_.tasks.end()) {
      *status = absl::InvalidArgumentError(
          absl::StrCat("Geryon data plane: ", peer_task, " is not a task of the cluster spec"));
      return nullptr;
    }
    host = it->second.host;
    data_port = it->second.data_port;
    auto& s = slots_[peer_task][cls];
    if (!s) s = std::make_unique<Slot>();
    slot = s.get();  // slots are never removed: the pointer stays valid for the dialing thread
  }
  {
    MutexLock l(slot->mu);
    if (slot->dialed_host != host || slot->dialed_port != data_port) {
      // A restarted coordinator or task at a new address: forget the old flow and its failure.
      slot->conn.reset();
      slot->failure.clear();
    }
    if (slot->conn && !slot->conn->broken()) return slot->conn;
    if (slot->dialing) {
      slot->queued.push_back(Queued{p, step_id, key});
      return nullptr;
    }
    if (!slot->failure.empty() && std::chrono::steady_clock::now() - slot->failed_at < kFailFastWindow) {
      *status = absl::Status(slot->failure_code, slot->failure);
      return nullptr;
    }
    slot->dialing = true;
    slot->queued.push_back(Queued{p, step_id, key});
  }
  PeerAddress peer;
  std::string local_task;
  {
    MutexLock v(view_mu_);
    auto it = view_.tasks.find(peer_task);
    if (it != view_.tasks.end()) peer = it->second;
    local_task = view_.local_task;
  }
  if (peer.host != host || peer.data_port != data_port) {
    // Learned at another address just now: dial what was looked up first (the next receive
    // sees the new address and redials).
    peer.task = peer_task;
    peer.host = host;
    peer.data_port = data_port;
  }
  // The dialing thread's stop does nothing: Dial sees stopping_ (set by the accept loop's stop,
  // which Stop runs before it joins) within kDialPoll, or its hello wait ends (kHelloAckTimeoutSeconds).
  if (!threads_.Spawn("geryon_dial", [this, slot, peer, cls, local_task] { DialFlow(slot, peer, cls, local_task); },
                      [] {})) {
    FinishDial(slot, peer, cls, local_task, -1, 0, false, absl::StatusCode::kUnavailable,
               "cannot start a thread to connect (the transport is stopping or out of threads)");
  }
  *status = absl::OkStatus();
  return nullptr;
}

void TcpTransport::DialFlow(Slot* slot, const PeerAddress& peer, int cls, const std::string& local_task) {
  std::string error;
  int port = 0;
  bool refused = false;
  absl::StatusCode refusal_code = absl::StatusCode::kFailedPrecondition;
  int fd = Dial(peer, cls, local_task, &error, &port, &refused, &refusal_code);
  FinishDial(slot, peer, cls, local_task, fd, port, refused, refusal_code, error);
}

void TcpTransport::FinishDial(Slot* slot, const PeerAddress& peer, int cls, const std::string& local_task, int fd,
    int port, bool refused, absl::StatusCode refusal_code, const std::string& error) {
  const std::string& peer_task = peer.task;
  auto counters = CountersFor("consumer", local_task, peer_task, cls);
  std::shared_ptr<ClientConn> conn;
  absl::Status failed;
  std::vector<Queued> queued;
  {
    MutexLock l(slot->mu);
    slot->dialed_host = peer.host;
    slot->dialed_port = peer.data_port;
    if (fd < 0) {
      if (refused && refusal_code == absl::StatusCode::kUnavailable) {
        // The task is at its connection limit: transient (a flow may close, the operator may raise
        // it), so Unavailable, which TF retries; the producer's message names the limit.
        slot->failure = absl::StrCat(error, PeerTag(peer_task));
        slot->failure_code = absl::StatusCode::kUnavailable;
      } else if (refused) {
        // The task itself refused us (not in its cluster, another protocol version): permanent, as
        // on gRPC, so that ClusterCoordinator does not retry it as a lost worker.
        slot->failure = absl::StrCat(error, PeerTag(peer_task));
        slot->failure_code = absl::StatusCode::kFailedPrecondition;
      } else {
        // "failed to connect to all addresses" is gRPC's phrase for this, which TF's own PS tests
        // expect.
        slot->failure = absl::StrCat("Geryon data plane: cannot reach ", peer_task, " at ", peer.host, ":",
                                     peer.data_port, " (class ", cls,
                                     "): failed to connect to all addresses; last error: ", error,
                                     PeerTag(peer_task));
        slot->failure_code = absl::StatusCode::kUnavailable;
      }
      slot->failed_at = std::chrono::steady_clock::now();
      counters->errors += 1;
      failed = absl::Status(slot->failure_code, slot->failure);
    } else {
      slot->failure.clear();
      counters->connections += 1;
      counters->dscp = DscpForClass(cls);
      counters->local_port = LocalPort(fd);
      counters->peer_port = port;
      slot->conn = std::make_shared<ClientConn>(fd, peer_task, cls, counters, &loop_);
      slot->conn->Start();  // read by the event loop from now on
      conn = slot->conn;
    }
    slot->dialing = false;
    queued.swap(slot->queued);
  }
  for (Queued& q : queued) {
    if (q.p->finished()) {
      // Aborted while it waited (nothing else ends a queued receive); its Abort had no flow
      // counters to count it in, so it is counted here: no request goes out for it.
      counters->aborted += 1;
      continue;
    }
    if (conn != nullptr) {
      conn->Send(q.p, q.step_id, q.key);  // a connection broken meanwhile fails it
    } else {
      q.p->Finish(failed, Tensor(), false);
    }
  }
}

int TcpTransport::Dial(const PeerAddress& peer, int cls, const std::string& local_task, std::string* error, int* port,
    bool* refused, absl::StatusCode* refusal_code) {
  std::string hello = HelloFrame(local_task, cls, peer.task);
  const auto deadline = std::chrono::steady_clock::now() + kConnectDeadline;
  // Why the connect ended without a connection when the deadline or a stop cut it short.
  auto gave_up = [&](const char* why) {
    *error = absl::StrCat(error->empty() ? "no answer" : *error, "; ", why, " after ",
                          std::chrono::duration_cast<std::chrono::seconds>(kConnectDeadline).count(), " s");
    return -1;
  };
  int backoff_ms = kFirstBackoffMs;
  for (int attempt = 0; attempt < kConnectAttempts; ++attempt) {
    if (attempt > 0) {
      const auto wake = std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff_ms);
      if (wake >= deadline) return gave_up("gave up connecting");
      while (std::chrono::steady_clock::now() < wake) {
        if (stopping_) return gave_up("the transport stopped");
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            kDialPoll, wake - std::chrono::steady_clock::now()));
      }
      backoff_ms *= 2;
    }
    for (int i = 0; i < kDataPortCandidates; ++i) {
      if (stopping_) return gave_up("the transport stopped");
      if (std::chrono::steady_clock::now() >= deadline) return gave_up("gave up connecting");
      const int candidate = DataPortCandidate(peer.data_port, i);
      bool host_failed = false;
      int fd = Connect(peer.host, candidate, cls, deadline, error, &host_failed);
      // Refused: nobody listens there (yet), the next candidate. A host that does not resolve,
      // answer or route fails every candidate alike: back off instead of waiting 8 times.
      if (fd < 0 && host_failed) break;
      if (fd < 0) continue;
      iovec iov{hello.data(), hello.size()};
      if (!WriteAll(fd, &iov, 1, error)) {
        close(fd);
        continue;
      }
      switch (ReadAnswer(fd, peer.task, candidate, deadline, error, refusal_code)) {
        case Answer::kAck:
          *port = candidate;
          return fd;
        case Answer::kRefused:
          close(fd);
          *refused = true;
          return -1;
        case Answer::kOther:
          close(fd);
          continue;
      }
    }
  }
  return -1;
}

int TcpTransport::Connect(const std::string& host, int port, int cls, std::chrono::steady_clock::time_point deadline,
    std::string* error, bool* host_failed) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *error = absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc));
    *host_failed = true;
    return -1;
  }
  int fd = -1;
  bool refused = false;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    MarkSocket(fd, cls, /*consumer=*/true);
    int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    while (err == EINPROGRESS || err == EINTR) {
      if (stopping_) {
        err = ECANCELED;
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        err = ETIMEDOUT;
        break;
      }
      const auto slice = std::min<std::chrono::steady_clock::duration>(kDialPoll, deadline - now);
      pollfd pfd{fd, POLLOUT, 0};
      const int n = poll(&pfd, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(slice).count()));
      if (n < 0 && errno != EINTR) {
        err = errno;
      } else if (n > 0) {
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // the flow's reads and writes block
    } else {
      refused = refused || err == ECONNREFUSED;
      *error = err == ETIMEDOUT ? absl::StrCat("port ", port, ": no answer to the connect")
                                : absl::StrCat("port ", port, ": ", ErrnoText(err));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0 && !refused) *host_failed = true;
  return fd;
}

TcpTransport::Answer TcpTransport::ReadAnswer(int fd, const std::string& task, int port,
    std::chrono::steady_clock::time_point deadline, std::string* error, absl::StatusCode* refusal_code) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
  const int64_t wait_us = std::max<int64_t>(1000, std::min<int64_t>(kHelloAckTimeoutSeconds * 1000000LL, left.count()));
  timeval wait{static_cast<time_t>(wait_us / 1000000), static_cast<suseconds_t>(wait_us % 1000000)}, none{0, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  uint32_t magic;
  std::string e;
  Answer answer = Answer::kOther;
  if (!Get(fd, &magic, &e)) {
    *error = absl::StrCat("port ", port, ": no answer to the hello (", e, ")");
  } else if (magic == kHelloAckMagic) {
    uint16_t n = 0;
    std::string name;
    if (Get(fd, &n, &e) && n <= kMaxTaskBytes) {
      name.resize(n);
      if (!ReadFull(fd, name.data(), n, &e)) name.clear();
    }
    if (name == task) {
      answer = Answer::kAck;
    } else {
      *error = absl::StrCat("port ", port, " is ", name.empty() ? "another task" : name, "'s, not ", task, "'s");
    }
  } else if (magic == kResponseMagic) {
    // The refusal frame: u64 id (0), u8 kind (error) + 3 bytes, u32 code, u32 n, n bytes.
    uint64_t id = 1;
    uint32_t kind_and_pad = 0, code = 0, n = 0;
    if (Get(fd, &id, &e) && Get(fd, &kind_and_pad, &e) && Get(fd, &code, &e) && Get(fd, &n, &e) &&
        id == kRefusalId && n <= kMaxErrorBytes) {
      std::string msg(n, '\0');
      if (ReadFull(fd, msg.data(), n, &e)) {
        *error = msg;
        answer = Answer::kRefused;
        *refusal_code = static_cast<absl::StatusCode>(code) == absl::StatusCode::kUnavailable
                            ? absl::StatusCode::kUnavailable
                            : absl::StatusCode::kFailedPrecondition;
      }
    }
    if (answer != Answer::kRefused) *error = absl::StrCat("port ", port, ": a malformed answer to the hello");
  } else {
    *error = absl::StrCat("port ", port, " answered the hello with 0x", absl::Hex(magic), ", not Geryon's");
  }
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  return answer;
}

}  // namespace geryon
