// TCP data plane: one connection per (consumer task, producer task, class), made lazily by the
// consumer. The consumer writes small request frames; the producer answers on the same connection
// with the tensor bytes. Both ends mark the socket with the class's DSCP and priority, so the bulk
// direction (producer -> consumer) carries the class mark too. Wire format: README.md.
#include "transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <fstream>
#include <functional>
#include <mutex>
#include <map>
#include <set>
#include <system_error>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tsl/platform/logging.h"
#include "tsl/platform/thread_annotations.h"
#include "connection_limits.h"
#include "error_frame.h"
#include "event_loop.h"
#include "fallback.h"
#include "frame_reader.h"
#include "tsan.h"

namespace geryon {
namespace {

using tensorflow::Tensor;

constexpr uint32_t kHelloMagic = 0x48595247;  // "GRYH" on the wire (little-endian)
constexpr uint32_t kRequestMagic = 0x51595247;   // "GRYQ"
constexpr uint32_t kResponseMagic = 0x53595247;  // "GRYS"
constexpr uint32_t kChunkMagic = 0x43595247;     // "GRYC": a piece of a chunked response (kind 3)
constexpr uint32_t kHelloAckMagic = 0x41595247;  // "GRYA": the producer names itself after a hello
constexpr uint32_t kCancelMagic = 0x58595247;    // "GRYX": the consumer gave a receive up (protocol 4)
// 2 (issue 14): requests carry the urgency rank; raw responses may come in chunks (kind 3).
// 3 (issue 16): the hello names the task it is for, and the producer answers it (ack or refusal),
// so a consumer can try a task's data-port candidates (DataPortCandidate) until it finds that task.
// 4 (issue 16): cancel frames (consumer -> producer, `u32 kCancelMagic, u64 id`): an aborted receive
// tells the producer, which drops the queued response or stops sending its chunks.
// 5 (issue 16): error responses carry the Status's payloads (error_frame.h), as TF's gRPC does, so
// the consumer's Status is the producer's (kWorkerPossiblyRestarted and the like). Refusal frames
// (id 0) have no payload section: their layout stays that of every version.
constexpr uint16_t kProtocolVersion = 5;
// A request's rank for an edge that resolves to no parameter: unranked, and counted as unresolved by
// the producer as by the consumer. Any negative rank was already read as unranked, so the order a
// producer serves in is unchanged by it.
constexpr int32_t kUnresolvedRank = -1;
// Cancelled ids whose response was not queued yet (still being produced), kept so that it is dropped
// when it comes; bounded (oldest first), since a cancel may also come after its response went out.
constexpr size_t kMaxCancelled = 1024;
// Data-port candidates per task: the first that is free when the task starts is its data port.
constexpr int kDataPortCandidates = 8;
// How long a consumer waits for a producer's answer to its hello before it tries the next candidate.
constexpr int kHelloAckTimeoutSeconds = 5;
constexpr uint32_t kMaxKeyBytes = 64 * 1024;
constexpr uint32_t kMaxTaskBytes = 1024;
constexpr uint32_t kMaxDims = 254;  // TensorShape's own limit
constexpr uint64_t kMaxProtoBytes = (1ull << 31) - 1;
constexpr uint32_t kMaxErrorBytes = 1 << 20;
// Accepted connections alive at once in this process (a descriptor and a reader's buffer each; the
// event loop reads and writes them all); more are refused, so a flood of connections cannot exhaust
// the process's descriptors. The limit is sized from the cluster
// (connection_limits.h: SizeAcceptedConnections, when a transport starts or learns tasks).
std::atomic<int> g_accepted{0};
// A connection must send its hello within this time from its accept, else it is closed (its slot of
// the connection limit is freed).
constexpr int kHelloTimeoutSeconds = 10;
// Responses up to this size are written by the thread that produced them when the socket is idle.
constexpr int64_t kInlineResponseBytes = 64 * 1024;
// A write pass of the event loop (ServerConn::WritePass) makes at most this many sendmsg calls for
// one connection, then goes back to epoll_wait: a 100 MB response (in arrival order one frame)
// takes turns with the other connections' reads and writes. On loopback one call moves up to the
// socket's send buffer (megabytes), so the extra epoll_wait per pass costs little.
constexpr int kPassSends = 4;
// FrameChunk's drain-rate window: a few chunks' time even at 10 Gbit/s (256 KiB: 0.2 ms), short
// against a large response (100 MB: 80 ms at 10 Gbit/s).
constexpr int64_t kDrainWindowNs = 1000 * 1000;
constexpr uint8_t kRaw = 0, kProto = 1, kError = 2, kRawChunked = 3;
// A response's head without its dims: u32 magic, u64 id, u8 kind, u8 dead, u16 0, then u32 dtype,
// u32 ndims, dims, u64 nbytes (an error's: u32 code, u32 length, message).
constexpr size_t kResponseHeadBytes = 32;
// A producer's write pass sends up to kMaxBatchFrames queued responses of at most kBatchFrameBytes
// each with one sendmsg (WriteBatch): one sendmsg per 4 KiB response was a third of the PS's CPU time
// in the 200 x 4 KiB step (perf, issue 16). IOV_MAX (1024) bounds the iovecs: two per frame.
constexpr size_t kMaxBatchFrames = 64;
constexpr size_t kBatchFrameBytes = 64 * 1024;
// Urgency order: while at least a request header more is already readable on a connection, the
// producer holds its writes, so the responses of a burst of requests are ordered together instead
// of the first being sent before the rest are read. Bounded, so a stream of requests cannot
// hold the responses back for long.
constexpr uint32_t kRequestHeadBytes = 28;
constexpr int kMaxHeldRequests = 256;
// The gap wait (hold_gap_us) holds a burst at most this long after its first request.
constexpr int64_t kBurstWindowNs = 2 * 1000 * 1000;
constexpr int64_t kMaxHoldGapUs = 10 * 1000;
// An error response with this id (never a request's: ids start at 1) answers the hello: the producer
// refuses the connection (the task is not in its cluster spec, or not at that address) and closes.
constexpr uint64_t kRefusalId = 0;
// Lazy connect, on a thread of the transport (receives meanwhile wait on the flow): bounded retries
// with exponential backoff (about 3 s in all for a refused port), then Unavailable; a silent host
// or a producer that does not answer its hello is given kConnectDeadline in all.
constexpr int kConnectAttempts = 8;
constexpr int kFirstBackoffMs = 25;
constexpr auto kConnectDeadline = std::chrono::seconds(10);
// How often a connect in progress checks that the transport is stopping.
constexpr auto kDialPoll = std::chrono::milliseconds(100);
// A connect that failed this recently fails the next request at once instead of retrying again.
constexpr auto kFailFastWindow = std::chrono::milliseconds(1000);

// The i-th data-port candidate of a task whose first candidate is `first` (its gRPC port + offset).
// A task listens on the first free one; consumers try them in order and the producer's answer to
// the hello says whose port they reached. The stride (a prime) keeps the candidates of tasks with
// adjacent gRPC ports (2222, 2223, ...) apart; wraps within 1024..65535.
int DataPortCandidate(int first, int i) {
  constexpr int kStride = 1009, kLow = 1024, kSpan = 65536 - 1024;
  return kLow + ((first - kLow + i * kStride) % kSpan + kSpan) % kSpan;
}
// Keepalive: a peer silent for kKeepIdleSeconds gets kKeepCount probes kKeepIntervalSeconds apart;
// none answered -> the flow fails (about 10 s in all). The consumer also bounds how long a request
// may wait for its ACK (TCP_USER_TIMEOUT), the producer does not: see MarkSocket.
constexpr int kKeepIdleSeconds = 4;
constexpr int kKeepIntervalSeconds = 2;
constexpr int kKeepCount = 3;
constexpr unsigned int kConsumerUserTimeoutMs = 10000;

std::atomic<int> g_dscp[kMaxClasses] = {46, 26, 18, 10, 12, 20, 28, 8};
// SO_PRIORITY per class. Without the host agent the qdisc is usually pfifo_fast (or the default
// `prio`), which picks its band from the priority with prio2band = {1, 2, 2, 2, 1, 2, 0, 0, 1, ...}
// (net/sched/sch_generic.c): only 6 (TC_PRIO_INTERACTIVE) and 7 (TC_PRIO_CONTROL) reach band 0, 0
// (unmarked traffic, TC_PRIO_BESTEFFORT) is band 1, and 1, 2, 3, 5 all land in band 2, below
// unmarked traffic. So: class 0 -> 6 (band 0, ahead of everything but control), class 1 -> 0 (band 1,
// with unmarked traffic such as TF's own gRPC), classes 2-7 -> 2 (TC_PRIO_BULK, band 2). 7 stays
// free for the kernel's own control traffic. With the agent, set_class_marks replaces these with the
// priorities its DCB config maps to traffic classes.
std::atomic<int> g_priority[kMaxClasses] = {6, 0, 2, 2, 2, 2, 2, 2};
// Request ids are unique in the process, not per connection: a request (or its response) left over
// from a connection that failed can never match a receive on the connection that replaced it.
std::atomic<uint64_t> g_next_request_id{1};

std::atomic<ResponseOrder> g_order{ResponseOrder::kUrgency};
std::atomic<int64_t> g_chunk_bytes{kDefaultChunkBytes};
// Sender settings (transport.h, "Sender settings"): host order, the burst hold, the inline write,
// and the unsent-bytes bound of producer sockets.
std::atomic<SenderOrder> g_sender_order{SenderOrder::kHost};
std::atomic<bool> g_hold{true};
std::atomic<InlineWrite> g_inline{InlineWrite::kArrival};
std::atomic<bool> g_chunk_scale{true};  // sender option chunk_scale: link (true) | off
std::atomic<int64_t> g_notsent_lowat{kDefaultNotsentLowat};
std::atomic<int64_t> g_hold_gap_ns{kDefaultHoldGapUs * 1000};

Mutex g_arrivals_mu;
std::vector<ArrivalRecord>* g_arrivals TF_PT_GUARDED_BY(g_arrivals_mu) = new std::vector<ArrivalRecord>;
int64_t g_arrivals_capacity TF_GUARDED_BY(g_arrivals_mu) = 0;
std::atomic<bool> g_arrivals_on{false};

void LogArrival(const ArrivalRecord& a) {
  if (!g_arrivals_on.load(std::memory_order_relaxed)) return;
  MutexLock l(g_arrivals_mu);
  if (static_cast<int64_t>(g_arrivals->size()) < g_arrivals_capacity) g_arrivals->push_back(a);
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// TF's ClusterCoordinator tells a failed PS from a failed worker by this phrase in the error (see
// _is_ps_failure in cluster_coordinator.py); without it a dead PS looks like a dead worker, and the
// coordinator would wait for that worker to come back instead of failing the step.
std::string PeerTag(const std::string& peer_task) {
  return absl::StrCat(" [GRPC error information from remote target ", peer_task, "]");
}

// The edge name of a rendezvous key "<src>;<incarnation>;<dst>;<edge>;<frame:iter>", or "".
absl::string_view EdgeOfKey(absl::string_view key) {
  for (int field = 0; field < 3; ++field) {
    size_t at = key.find(';');
    if (at == absl::string_view::npos) return "";
    key.remove_prefix(at + 1);
  }
  return key.substr(0, key.find(';'));
}

// ---- per-flow counters -------------------------------------------------------------------------

struct FlowCounters {
  std::string role;  // "consumer": this task receives tensors on it; "producer": it sends them
  std::string local_task, peer_task;
  int cls = 0;
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};
  std::atomic<uint64_t> messages_sent{0}, messages_received{0};
  std::atomic<uint64_t> queue_ns{0};  // producer: response waited for the socket; consumer: round trip
  std::atomic<uint64_t> connections{0}, errors{0};
  std::atomic<uint64_t> aborted{0};  // consumer: receives ended by StartAbort/cancellation before their tensor
  // Responses whose edge resolves to no parameter (no graph-pass annotation, no TF1 binding): what
  // the pass could not trace, plus tensors that carry no parameter at all. They take the map_table's
  // default class; these counters make a model that defeats the pass visible. Both roles: the
  // consumer decides (its table chose the class) and tells the producer in the request's rank
  // (kUnresolvedRank), so a flow's two ends count the same responses, each the bytes it moved.
  std::atomic<uint64_t> unresolved_bytes{0}, unresolved_messages{0};
  // producer (issue 14): ns spent in the ordered queue's code (insert, pick), chunk frames sent, and
  // preemptions: a chunked response sent in part went back to the queue and another went next.
  std::atomic<uint64_t> order_ns{0}, chunks_sent{0}, preemptions{0};
  // producer: the chunk size in force when the last chunk frame started (chunk_bytes, or more on a
  // connection that drains faster than 10 Gbit/s: sender option chunk_scale; a response's last
  // chunk may carry less), and the last drain rate measured, bytes per second (0: none yet).
  std::atomic<uint64_t> chunk_bytes_last{0}, drain_bytes_per_s{0};
  // producer, host order: times a connection's write passes yielded to a more urgent response of the
  // same class on another connection, and the ns they waited.
  std::atomic<uint64_t> host_waits{0}, host_wait_ns{0};
  // issue 16: consumer: cancel frames sent for aborted receives; producer: responses dropped (queued,
  // or half sent in chunks) because their consumer cancelled them.
  std::atomic<uint64_t> cancels_sent{0}, cancelled{0};
  // producer (issue 16): steps aborted because this flow's consumer went away (or cancelled a
  // request) while a request of that step still waited for its tensor (TF's Worker::AbortStep).
  std::atomic<uint64_t> steps_aborted{0};
  // consumer: requests that went out with another thread's write (one sendmsg for several)
  std::atomic<uint64_t> requests_combined{0};
  // producer, burst hold: gap waits that ran out (the request they waited for did not come: the
  // held responses went up to hold_gap_us late), and gap waits skipped because the burst already
  // had as many requests as the connection's last bursts (ServerConn::CountRequest).
  std::atomic<uint64_t> gap_waits{0}, gap_skips{0};
  std::atomic<int> dscp{-1};
  std::atomic<int> local_port{0}, peer_port{0};
};

Mutex g_counters_mu;
std::map<std::string, std::shared_ptr<FlowCounters>>* g_counters TF_PT_GUARDED_BY(g_counters_mu) =
    new std::map<std::string, std::shared_ptr<FlowCounters>>;

std::shared_ptr<FlowCounters> CountersFor(const std::string& role, const std::string& local,
                                          const std::string& peer, int cls) {
  std::string key = absl::StrCat(role, "|", local, "|", peer, "|", cls);
  MutexLock l(g_counters_mu);
  auto& slot = (*g_counters)[key];
  if (!slot) {
    slot = std::make_shared<FlowCounters>();
    slot->role = role;
    slot->local_task = local;
    slot->peer_task = peer;
    slot->cls = cls;
  }
  return slot;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// ---- sockets -----------------------------------------------------------------------------------

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

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// The answer to a hello that is refused: an error frame with kRefusalId, `code` and a message naming
// this task. Its layout is the same in every protocol version, so an older consumer reads it too.
// `code` is kFailedPrecondition for a permanent refusal (not a task of the cluster, another
// protocol) and kUnavailable for a transient one (this process is at its connection limit); a
// consumer before that distinction takes every refusal as permanent.
std::string RefusalFrame(const std::string& local_task, const std::string& why, absl::StatusCode code) {
  std::string msg = absl::StrCat("Geryon data plane: ", local_task, " ", why);
  std::string frame;
  Put<uint32_t>(&frame, kResponseMagic);
  Put<uint64_t>(&frame, kRefusalId);
  frame += std::string{static_cast<char>(kError), 0, 0, 0};
  Put<uint32_t>(&frame, static_cast<uint32_t>(code));
  Put<uint32_t>(&frame, static_cast<uint32_t>(msg.size()));
  frame += msg;
  return frame;
}

template <typename T>
bool Get(int fd, T* v, std::string* error) {
  return ReadFull(fd, v, sizeof(T), error);
}

// ---- threads -----------------------------------------------------------------------------------

// The transport's threads: the accept loop, the event loop that reads and writes every connection
// (accepted and dialed), and short-lived ones (a connect, a hello's DNS lookup). No connection has a
// thread of its own (until issue 16 an accepted one had a reader and a writer, a dialed one a
// reader). Each one ends when its socket does (or its work); the set joins those that ended
// whenever it starts another (so it holds about one entry per connect in progress), and on Stop()
// wakes every one through its `stop` (shutdown of its socket, the loop's Stop) and joins
// them all. The owner is the TcpTransport, which lives as long as the process (server.cc releases
// it: TF's rendezvous managers keep a raw pointer to it and TF never destroys a GrpcServer), so no
// thread outlives the object whose members it uses.
class ThreadSet {
 public:
  ~ThreadSet() { Stop(); }

  // Runs `body` on a new thread named `name` (at most 15 characters: the kernel's limit; "geryon_..."
  // so that top -H, /proc/<pid>/task/*/comm and tests/tf/test_scale.py tell the data plane's threads
  // from TF's, where an unnamed thread would carry its creator's name, often a TF pool's); `stop` must
  // make it return soon (called at most once, from Stop). After Stop, starts nothing and returns false.
  bool Spawn(const char* name, std::function<void()> body, std::function<void()> stop) {
    MutexLock l(mu_);
    if (stopped_) return false;
    ReapLocked();
    uint64_t id = next_id_++;
    Entry& e = threads_[id];
    e.stop = std::move(stop);
    try {
      e.thread = std::thread([this, id, name, body = std::move(body)] {
        pthread_setname_np(pthread_self(), name);
        body();
        MutexLock l(mu_);
        ended_.push_back(id);
      });
    } catch (const std::system_error& err) {  // EAGAIN: out of threads (pids cgroup, RLIMIT_NPROC)
      LOG(ERROR) << "Geryon data plane: cannot start a thread: " << err.what();
      threads_.erase(id);
      return false;
    }
    return true;
  }

  void Stop() {
    std::unordered_map<uint64_t, Entry> threads;
    {
      MutexLock l(mu_);
      stopped_ = true;
      threads.swap(threads_);
      ended_.clear();
    }
    for (auto& [id, e] : threads) e.stop();
    for (auto& [id, e] : threads) e.thread.join();
  }

  size_t size() {
    MutexLock l(mu_);
    return threads_.size();
  }

 private:
  struct Entry {
    std::thread thread;
    std::function<void()> stop;
  };

  // A thread in ended_ has left its body and only returns: the join is immediate.
  void ReapLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (uint64_t id : ended_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      it->second.thread.join();
      threads_.erase(it);
    }
    ended_.clear();
  }

  Mutex mu_;
  bool stopped_ TF_GUARDED_BY(mu_) = false;
  uint64_t next_id_ TF_GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, Entry> threads_ TF_GUARDED_BY(mu_);
  std::vector<uint64_t> ended_ TF_GUARDED_BY(mu_);
};

// ---- consumer side -----------------------------------------------------------------------------

class ClientConn;

class PendingRecv : public RecvHandle {
 public:
  PendingRecv(tensorflow::Allocator* allocator, RecvDone done) : allocator_(allocator), done_(std::move(done)) {}

  void Abort(const absl::Status& status) override;
  bool finished() const { return finished_.load(); }
  void Finish(const absl::Status& s, const Tensor& t, bool is_dead) {
    if (finished_.exchange(true)) return;
    RecvDone done = std::move(done_);
    done(s, t, is_dead);
  }

  tensorflow::Allocator* const allocator_;
  bool unresolved_ = false;  // the key's edge carries no parameter id (counted per flow)
  int32_t rank_ = kUnranked;  // urgency rank sent with the request
  int64_t param_id_ = -1;
  int cls_ = 0;
  // A chunked response (kind 3) being reassembled; touched by the event loop's thread only. The
  // tensor's buffer stays referenced here, so chunks may land in it even after an abort.
  bool chunked_ = false;
  bool is_dead_ = false;
  Tensor tensor_;
  uint64_t expected_ = 0, received_ = 0, wire_bytes_ = 0;
  std::shared_ptr<FlowCounters> counters_;
  std::weak_ptr<ClientConn> conn_;
  uint64_t id_ = 0;
  int64_t start_ns_ = 0;

 private:
  RecvDone done_;
  std::atomic<bool> finished_{false};
};

// A consumer (dialed) connection. Its reads are the transport's event loop's (EventLoop::Handler,
// added once the hello is answered, on the loop thread only, never blocking): until issue 16 each
// dialed flow had a reader thread of its own, so a worker talking to 64 PSes on 4 classes ran 256 of
// them. Responses are parsed out of the connection's FrameReader as they arrive; a body the socket
// does not hold yet is read across wake-ups ("body in progress"), a large one straight into the
// tensor's buffer. Completions (RecvDone) run on the loop thread. Its writes (requests, cancels) are
// the receiving threads' (Send, SendCancel), non-blocking: what a full socket does not take waits in
// `unsent_` and the loop writes it when the socket has room (WatchWrite, OnWritable), so neither a
// receiving thread nor the loop (a RecvDone that issues the next receive) ever waits on a producer
// that does not read. The descriptor is closed by the loop when the flow ends (End), under the write
// lock, so never under a live write. A dead producer is found by keepalive and TCP_USER_TIMEOUT
// (MarkSocket): the socket's error wakes the loop, whose recv() then fails; no timer of its own.
class ClientConn : public EventLoop::Handler, public std::enable_shared_from_this<ClientConn> {
 public:
  ClientConn(int fd, std::string peer, int cls, std::shared_ptr<FlowCounters> counters, EventLoop* loop)
      : fd_(fd), peer_(std::move(peer)), cls_(cls), counters_(std::move(counters)), loop_(loop) {}

  // Hands the connection to the transport's loop, which reads it from now on. A loop that is
  // stopping (the transport is shutting down) takes nothing: the flow fails and the socket is closed.
  // The socket becomes non-blocking here (the dial's hello and its answer were blocking, bounded by
  // their deadlines).
  void Start() {
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    if (loop_->Add(shared_from_this())) return;
    Fail("the transport is shutting down");
    MutexLock w(write_mu_);
    fd_closed_ = true;
    close(fd_);
  }

  int fd() const override { return fd_; }
  // Requests written before the loop registered the connection may have found the socket full; the
  // flush they posted ran before this (it did not find the connection), so it is done here.
  void OnAdded() override { Flush(); }
  void OnTimer() override {}  // no deadline: a silent producer is found by keepalive (MarkSocket)
  void OnWritable() override { Flush(); }

  // Loop thread: one non-blocking recv() of what the socket holds, then every whole frame in the
  // reader's buffer (same checks, same errors, same order as the reader thread's blocking loop had).
  // What is not whole waits for the next wake-up. A body in progress whose rest is at least
  // FrameReader::kDirectBytes, with nothing buffered, is read straight into its destination instead.
  void OnReadable() override {
    if (ended_) return;
    std::string error;
    if (!ReadsDirect()) {
      switch (reader_.RecvAvailable(&error)) {
        case FrameReader::Got::kWouldBlock:
          return;
        case FrameReader::Got::kClosed:
          End(std::move(error));
          return;
        case FrameReader::Got::kData:
          break;
      }
      if (!ReadFrames(&error)) {
        End(std::move(error));
        return;
      }
      // A large body whose head came with this refill (which takes at most 512 bytes after a body
      // read straight into its tensor): the socket most likely holds more of it, so it is read now,
      // not after another epoll_wait. Otherwise one recv() per wake-up.
      if (!ReadsDirect()) return;
    }
    size_t got = 0;
    switch (reader_.RecvDirect(body_.dest, static_cast<size_t>(body_.left), &got, &error)) {
      case FrameReader::Got::kWouldBlock:
        return;
      case FrameReader::Got::kClosed:
        End(std::move(error));
        return;
      case FrameReader::Got::kData:
        break;
    }
    body_.dest += got;
    body_.left -= got;
    if (body_.left == 0) FinishBody();  // the frames behind it: the next wake-up (level-triggered)
  }

  // Loop thread, the loop stopping (the transport is shutting down): the flow fails, as the reader
  // thread's stop did.
  void OnStop() override { End("the transport is shutting down"); }

  bool broken() {
    MutexLock l(mu_);
    return broken_;
  }

  // Registers `p` and writes its request frame. On a broken connection, fails `p`. Any thread,
  // including the loop's (a RecvDone that issues the next receive): the write never blocks (a full
  // socket keeps the frame in unsent_ for the loop, WriteLocked).
  void Send(const std::shared_ptr<PendingRecv>& p, int64_t step_id, const std::string& key) {
    std::string broken_reason;
    absl::StatusCode broken_code = absl::StatusCode::kUnavailable;
    {
      MutexLock l(mu_);
      if (broken_) {
        broken_reason = broken_reason_;
        broken_code = broken_code_;
      } else {
        p->id_ = g_next_request_id.fetch_add(1, std::memory_order_relaxed);
        p->start_ns_ = NowNs();  // before the loop can see it in pending_
        p->conn_ = weak_from_this();
        p->counters_ = counters_;
        pending_[p->id_] = p;
      }
    }
    if (!broken_reason.empty()) {  // finished outside mu_: RecvDone runs TF code
      p->Finish(absl::Status(broken_code, broken_reason), Tensor(), false);
      return;
    }
    // The head on the stack and the key from the caller's string: no allocation per request.
    char head[kRequestHeadBytes];
    const uint32_t key_len = static_cast<uint32_t>(key.size());
    std::memcpy(head, &kRequestMagic, 4);
    std::memcpy(head + 4, &p->id_, 8);
    std::memcpy(head + 12, &step_id, 8);
    const int32_t rank = p->unresolved_ ? kUnresolvedRank : p->rank_;
    std::memcpy(head + 20, &rank, 4);
    std::memcpy(head + 24, &key_len, 4);
    iovec iov[2] = {{head, sizeof(head)}, {const_cast<char*>(key.data()), key.size()}};
    const size_t frame_bytes = sizeof(head) + key.size();
    counters_->bytes_sent += frame_bytes;
    counters_->messages_sent += 1;
    {
      // Another thread is writing requests (TF's executor issues a step's receives from its
      // inter-op threads at once): this one goes out with its next write, so a burst of requests
      // costs fewer sendmsg calls (and wakes the producer fewer times).
      MutexLock o(out_mu_);
      if (writing_) {
        outbox_.append(head, sizeof(head));
        outbox_.append(key);
        counters_->requests_combined += 1;
        return;
      }
      writing_ = true;
    }
    std::string error;
    bool ok;
    {
      // The descriptor is closed only under write_mu_ (End), so while we hold it fd_ is still
      // this connection's socket and not a number the kernel gave to a newer one.
      MutexLock l(write_mu_);
      ok = WriteLocked(iov, 2, &error);
      // Then what others left meanwhile, until nothing is left (writing_ ends under out_mu_, so a
      // request is either appended before that, and sent here, or its thread writes it itself).
      while (true) {
        {
          MutexLock o(out_mu_);
          if (!ok || outbox_.empty()) {
            writing_ = false;
            outbox_.clear();  // after a failure: their receives are pending, Fail ends them
            break;
          }
          batch_.swap(outbox_);  // both keep their capacity: no allocation per burst
        }
        iovec b{batch_.data(), batch_.size()};
        ok = WriteLocked(&b, 1, &error);
        batch_.clear();
      }
    }
    if (!ok) {
      Fail(absl::StrCat("sending a request failed: ", error));
      return;
    }
  }

  // Drops the pending receive `id` (aborted); true if it was still pending.
  bool Forget(uint64_t id) {
    MutexLock l(mu_);
    return pending_.erase(id) > 0;
  }

  // Tells the producer that receive `id` was given up (a cancel frame), so it drops the response or
  // stops sending its chunks instead of filling the flow with bytes nobody reads. Best effort: on a
  // broken or closed connection there is nobody to tell.
  void SendCancel(uint64_t id) {
    {
      MutexLock l(mu_);
      if (broken_) return;
    }
    char frame[12];
    std::memcpy(frame, &kCancelMagic, 4);
    std::memcpy(frame + 4, &id, 8);
    iovec iov{frame, sizeof(frame)};
    std::string error;
    bool ok;
    {
      MutexLock l(write_mu_);
      ok = WriteLocked(&iov, 1, &error);
    }
    if (!ok) return;  // the loop sees the broken socket and fails the flow
    counters_->bytes_sent += sizeof(frame);
    counters_->cancels_sent += 1;
  }

 private:
  // Writes the frames in `iov` without blocking, behind any bytes still unsent: one sendmsg when
  // nothing waits, and what the socket does not take is kept in unsent_ for the loop, which is told
  // to write it (Flush) when unsent_ stops being empty. False with `*error` on a socket error or a
  // closed descriptor (the caller fails the flow). Frames stay whole and in order: every writer
  // appends behind unsent_ under write_mu_.
  bool WriteLocked(iovec* iov, int iovcnt, std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    if (fd_closed_) {
      *error = "the connection is closed";
      return false;
    }
    size_t sent = 0;
    if (unsent_.empty()) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(iovcnt);
      while (true) {
        const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) {
          sent = static_cast<size_t>(n);
          break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;  // full: all of it waits
        *error = ErrnoText(errno);
        return false;
      }
    }
    const bool was_empty = unsent_.empty();
    for (int i = 0; i < iovcnt; ++i) {
      const size_t skip = std::min(sent, iov[i].iov_len);
      sent -= skip;
      unsent_.append(static_cast<const char*>(iov[i].iov_base) + skip, iov[i].iov_len - skip);
    }
    if (was_empty && !unsent_.empty()) {
      // Posted from the loop thread (a RecvDone's next receive), this costs no wake-up.
      std::weak_ptr<ClientConn> weak = weak_from_this();
      loop_->Post([weak] {
        if (auto self = weak.lock()) self->Flush();
      });
    }
    return true;
  }

  // Loop thread: writes what unsent_ holds as far as the socket takes it, and watches the socket for
  // room while some is left (level-triggered: OnWritable comes back with every wait that finds
  // room). A socket error fails the flow (its EOF then ends it on the loop).
  void Flush() TF_LOCKS_EXCLUDED(write_mu_, mu_) {
    std::string error;
    {
      MutexLock w(write_mu_);
      if (fd_closed_) return;
      while (!unsent_.empty()) {
        const ssize_t n = send(fd_, unsent_.data(), unsent_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0) {
          error = ErrnoText(errno);
          unsent_.clear();  // their receives are pending: Fail ends them
          break;
        }
        unsent_.erase(0, static_cast<size_t>(n));
      }
      // A connection not registered yet is not found: OnAdded flushes again.
      loop_->WatchWrite(this, !unsent_.empty());
    }
    if (!error.empty()) Fail(absl::StrCat("sending a request failed: ", error));
  }

  // Where the loop is in the response stream: between frames (or in a frame's head, which waits in
  // the reader's buffer until it is whole), in a body, in a small TensorProto that is parsed once it
  // is whole in the buffer, or gathering an error frame (its message and payloads may exceed the
  // buffer).
  enum class State { kHead, kBody, kProtoInBuffer, kError };
  // What the body in progress is, and what happens when its last byte is in.
  enum class BodyOf { kRaw, kChunk, kProto };
  struct Body {
    char* dest = nullptr;  // the next byte's place; nullptr: skipped (nobody waits for it)
    uint64_t left = 0;
    BodyOf of = BodyOf::kRaw;
  };

  std::shared_ptr<PendingRecv> Find(uint64_t id) {
    MutexLock l(mu_);
    auto it = pending_.find(id);
    return it == pending_.end() ? nullptr : it->second;
  }

  std::shared_ptr<PendingRecv> Take(uint64_t id) {
    MutexLock l(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return nullptr;
    auto p = it->second;
    pending_.erase(it);
    return p;
  }

  // Closes the connection and fails every pending receive with a message naming the flow, and
  // `taken` too: the receive whose response was being read when the flow broke (its head had
  // already removed it from pending_, so without this it would wait forever). Any thread, once per
  // flow for the pending ones: the shutdown makes the socket readable at EOF, and the loop then
  // ends the flow (End: the receive in progress failed, the descriptor closed).
  // `code`: Unavailable for a lost flow (TF's ClusterCoordinator then treats the peer as failed
  // and may retry); a permanent refusal keeps the code the producer sent (see kRefusalId).
  void Fail(const std::string& what, std::shared_ptr<PendingRecv> taken = nullptr,
            absl::StatusCode code = absl::StatusCode::kUnavailable) TF_LOCKS_EXCLUDED(mu_) {
    std::unordered_map<uint64_t, std::shared_ptr<PendingRecv>> pending;
    std::string reason;
    {
      MutexLock l(mu_);
      if (!broken_) {
        broken_ = true;
        broken_code_ = code;
        broken_reason_ = absl::StrCat("Geryon data plane: flow to ", peer_, " (class ", cls_, ") failed: ", what,
                                      PeerTag(peer_));
        LOG(ERROR) << broken_reason_;
        counters_->errors += 1;
        shutdown(fd_, SHUT_RDWR);
      }
      reason = broken_reason_;
      code = broken_code_;
      pending.swap(pending_);
    }
    if (taken != nullptr) taken->Finish(absl::Status(code, reason), Tensor(), false);
    for (auto& [id, p] : pending) p->Finish(absl::Status(code, reason), Tensor(), false);
  }

  // Loop thread: the flow's reading ends (EOF, a socket error, a malformed frame, a refusal, the
  // loop stopping). Every pending receive fails, the one in progress too; the loop stops watching
  // the socket before it is closed (its number may be reused at once, by a redial).
  void End(std::string error) TF_LOCKS_EXCLUDED(write_mu_, mu_) {
    if (ended_) return;
    ended_ = true;
    // gRPC's words for a lost connection, which TF's own PS tests look for in the error.
    if (error == "connection closed by peer") error = "connection closed by peer (Socket closed)";
    std::shared_ptr<PendingRecv> taken = std::move(taken_);
    frame_p_.reset();
    chunk_p_.reset();  // still pending: Fail ends it with the rest
    frame_tensor_ = Tensor();
    Fail(error, std::move(taken), refusal_code_);
    loop_->Remove(this);  // from OnStop it finds nothing: the loop forgets it anyway
    // Close under write_mu_: Fail's shutdown() has woken any writer blocked in sendmsg, and no
    // writer can start once fd_closed_ is set, so the number is never closed under a live write
    // (a redial may get the same number at once).
    MutexLock w(write_mu_);
    fd_closed_ = true;
    unsent_.clear();
    close(fd_);
  }

  // Loop thread: every frame the reader's buffer holds, as far as it goes; false with `error` on a
  // malformed frame or a refusal (the flow ends).
  bool ReadFrames(std::string* error) {
    while (!ended_) {
      switch (state_) {
        case State::kBody: {
          // The buffered part of the body; a large rest comes straight from the socket (OnReadable).
          const size_t n = static_cast<size_t>(std::min<uint64_t>(body_.left, reader_.buffered()));
          if (body_.dest != nullptr) {
            std::memcpy(body_.dest, reader_.data(), n);
            body_.dest += n;
          }
          reader_.Consume(n);
          body_.left -= n;
          if (body_.left > 0) return true;
          FinishBody();
          break;
        }
        case State::kProtoInBuffer: {
          if (reader_.buffered() < frame_payload_) return true;
          const char* bytes = reader_.data();
          reader_.Consume(static_cast<size_t>(frame_payload_));  // valid until the next refill
          CompleteProto(bytes);
          break;
        }
        case State::kError: {
          const Parse parsed = GatherError(error);
          if (parsed == Parse::kNeedMore) return true;
          if (parsed == Parse::kFailed) return false;
          break;
        }
        case State::kHead: {
          if (reader_.buffered() == 0) return true;
          const Parse parsed = ParseHead(error);
          if (parsed == Parse::kNeedMore) return true;
          if (parsed == Parse::kFailed) return false;
          break;
        }
      }
    }
    return true;
  }

  enum class Parse { kDone, kNeedMore, kFailed };

  // The body in progress goes straight from the socket into its destination (nothing buffered, a
  // rest worth a recv() of its own).
  bool ReadsDirect() const {
    return !ended_ && state_ == State::kBody && body_.dest != nullptr && reader_.buffered() == 0 &&
           body_.left >= FrameReader::kDirectBytes;
  }

  // The fields of a frame head, read out of the buffer without consuming it: a head that is not
  // whole yet is parsed again from its start at the next wake-up (a few dozen bytes).
  class Fields {
   public:
    Fields(const char* data, size_t n) : data_(data), n_(n) {}
    template <typename T>
    bool Get(T* v) {
      if (n_ - at_ < sizeof(T)) return false;
      std::memcpy(v, data_ + at_, sizeof(T));
      at_ += sizeof(T);
      return true;
    }
    const char* Take(size_t n) {
      if (n_ - at_ < n) return nullptr;
      const char* p = data_ + at_;
      at_ += n;
      return p;
    }
    size_t at() const { return at_; }

   private:
    const char* const data_;
    const size_t n_;
    size_t at_ = 0;
  };

  // Loop thread: the head of the next frame, checked field by field as the reader thread checked
  // it (same limits, same error texts). A whole head is consumed and sets what follows: a body, a
  // small proto, an error frame's rest, or nothing (a chunked response's head).
  Parse ParseHead(std::string* error) {
    Fields f(reader_.data(), reader_.buffered());
    uint32_t magic;
    if (!f.Get(&magic)) return Parse::kNeedMore;
    if (magic == kChunkMagic) return ParseChunkHead(&f, error);
    if (magic != kResponseMagic) {
      *error = absl::StrCat("malformed frame (bad magic 0x", absl::Hex(magic), ")");
      return Parse::kFailed;
    }
    // u64 id, u8 kind, u8 is_dead, u16 0
    const char* head = f.Take(12);
    if (head == nullptr) return Parse::kNeedMore;
    uint64_t id;
    std::memcpy(&id, head, 8);
    const uint8_t kind = static_cast<uint8_t>(head[8]);
    const bool is_dead = head[9] != 0;
    if (kind == kError) {
      // Its message (up to kMaxErrorBytes) and payloads may not fit the buffer: gathered apart.
      reader_.Consume(f.at());
      frame_id_ = id;
      frame_is_dead_ = is_dead;
      error_.clear();
      state_ = State::kError;
      return Parse::kDone;
    }
    uint64_t header_bytes = 16;
    if (kind == kRaw || kind == kRawChunked) {
      uint32_t dtype, ndims;
      if (!f.Get(&dtype) || !f.Get(&ndims)) return Parse::kNeedMore;
      if (!tensorflow::DataType_IsValid(static_cast<int>(dtype)) || dtype == 0 ||
          !tensorflow::DataTypeCanUseMemcpy(static_cast<tensorflow::DataType>(dtype)) || ndims > kMaxDims) {
        *error = absl::StrCat("malformed tensor frame (dtype ", dtype, ", ", ndims, " dims)");
        return Parse::kFailed;
      }
      int64_t dims[kMaxDims];  // on the stack: no allocation per response
      const char* dims_at = f.Take(ndims * sizeof(int64_t));
      if (dims_at == nullptr) return Parse::kNeedMore;
      if (ndims > 0) std::memcpy(dims, dims_at, ndims * sizeof(int64_t));
      uint64_t nbytes;
      if (!f.Get(&nbytes)) return Parse::kNeedMore;
      header_bytes += 16 + 8ull * ndims;
      tensorflow::TensorShape shape;
      auto dt = static_cast<tensorflow::DataType>(dtype);
      if (!tensorflow::TensorShape::BuildTensorShape(absl::Span<const int64_t>(dims, ndims), &shape).ok() ||
          static_cast<uint64_t>(shape.num_elements()) * tensorflow::DataTypeSize(dt) != nbytes) {
        *error = absl::StrCat("malformed tensor frame (", nbytes, " bytes do not match the shape)");
        return Parse::kFailed;
      }
      reader_.Consume(f.at());
      if (kind == kRawChunked) {
        // A chunked response stays pending until its last chunk (so a broken flow fails it with the
        // rest); it has no body of its own.
        return StartChunked(id, Find(id), dt, shape, nbytes, is_dead, header_bytes, error) ? Parse::kDone
                                                                                          : Parse::kFailed;
      }
      std::shared_ptr<PendingRecv> p = StartFrame(id, is_dead, header_bytes, nbytes);
      Body body;
      body.left = nbytes;
      body.of = BodyOf::kRaw;
      if (p != nullptr && !p->finished()) {
        frame_tensor_ = Tensor(p->allocator_, dt, shape);
        if (frame_tensor_.IsInitialized()) {
          ClaimBytes(frame_tensor_.tensor_data().data(), nbytes);  // maybe reused: tsan.h
          // Into the tensor's buffer: what is buffered is copied, a large rest comes straight from
          // the socket (no staging copy).
          body.dest = const_cast<char*>(frame_tensor_.tensor_data().data());
        } else {
          frame_status_ = absl::ResourceExhaustedError(
              absl::StrCat("Geryon data plane: cannot allocate ", nbytes, " bytes for a tensor from ", peer_));
        }
      }
      StartBody(body);
      return Parse::kDone;
    }
    if (kind == kProto) {
      uint64_t nbytes;
      if (!f.Get(&nbytes)) return Parse::kNeedMore;
      if (nbytes > kMaxProtoBytes) {
        *error = absl::StrCat("malformed tensor frame (", nbytes, " proto bytes)");
        return Parse::kFailed;
      }
      reader_.Consume(f.at());
      std::shared_ptr<PendingRecv> p = StartFrame(id, is_dead, header_bytes + 8, nbytes);
      if (nbytes <= reader_.capacity()) {
        // A small proto is parsed where it lies in the reader's buffer, once it is whole there.
        state_ = State::kProtoInBuffer;
        return Parse::kDone;
      }
      // A larger one gets its own buffer, unless nobody waits for it.
      Body body;
      body.left = nbytes;
      body.of = BodyOf::kProto;
      if (p != nullptr && !p->finished()) {
        large_.resize(nbytes);
        body.dest = large_.data();
      }
      StartBody(body);
      return Parse::kDone;
    }
    *error = absl::StrCat("malformed frame (unknown kind ", static_cast<int>(kind), ")");
    return Parse::kFailed;
  }

  // A whole response's head was read: its receive leaves pending_ (so a broken flow fails it
  // through taken_), and its round trip is counted.
  std::shared_ptr<PendingRecv> StartFrame(uint64_t id, bool is_dead, uint64_t header_bytes, uint64_t payload) {
    std::shared_ptr<PendingRecv> p = Take(id);
    taken_ = p;
    frame_p_ = p;
    if (p != nullptr) counters_->queue_ns += NowNs() - p->start_ns_;
    frame_is_dead_ = is_dead;
    frame_header_bytes_ = header_bytes;
    frame_payload_ = payload;
    frame_status_ = absl::OkStatus();
    frame_tensor_ = Tensor();
    return p;
  }

  void StartBody(const Body& body) {
    body_ = body;
    state_ = State::kBody;
  }

  // The last byte of the body in progress is in: the frame completes (a chunk may complete its
  // response; a proto that does not decode fails only its receive).
  void FinishBody() {
    state_ = State::kHead;
    switch (body_.of) {
      case BodyOf::kRaw:
        Complete();
        break;
      case BodyOf::kProto:
        CompleteProto(large_.data());
        large_.clear();
        large_.shrink_to_fit();  // up to 2 GiB: not kept for the next one
        break;
      case BodyOf::kChunk: {
        std::shared_ptr<PendingRecv> p = std::move(chunk_p_);
        if (p == nullptr) break;  // skipped
        p->received_ += chunk_len_;
        p->wire_bytes_ += 24 + chunk_len_;
        if (p->received_ == p->expected_) CompleteChunked(p);
        break;
      }
    }
  }

  // A TensorProto's bytes are all there (in the reader's buffer or large_).
  void CompleteProto(const char* bytes) {
    state_ = State::kHead;
    const std::shared_ptr<PendingRecv>& p = frame_p_;
    if (p != nullptr && !p->finished()) {
      tensorflow::TensorProto proto;
      // The frame was read whole, so the flow is still in step: only this receive fails, with
      // Internal as TF's own RPC rendezvous does for a tensor it cannot decode.
      if (!proto.ParseFromArray(bytes, static_cast<int>(frame_payload_)) ||
          !frame_tensor_.FromProto(p->allocator_, proto)) {
        frame_status_ = absl::InternalError(absl::StrCat("Geryon data plane: a tensor from ", peer_,
                                                         " could not be decoded (malformed TensorProto, ",
                                                         frame_payload_, " bytes)"));
        frame_tensor_ = Tensor();
      }
    }
    Complete();
  }

  // The frame in hand is whole: counted, and its receive (if any still waits) finished, here on the
  // loop thread (RecvDone: server.cc's completion, which hands the tensor to TF, or starts its
  // asynchronous copy to the device).
  void Complete() {
    state_ = State::kHead;
    std::shared_ptr<PendingRecv> p = std::move(frame_p_);
    Tensor tensor = std::move(frame_tensor_);
    frame_tensor_ = Tensor();
    taken_.reset();
    counters_->bytes_received += frame_header_bytes_ + frame_payload_;
    counters_->messages_received += 1;
    if (p != nullptr && p->unresolved_) {
      counters_->unresolved_bytes += frame_header_bytes_ + frame_payload_;
      counters_->unresolved_messages += 1;
    }
    if (p != nullptr) {
      if (frame_status_.ok() && !p->finished()) LogArrival({NowNs(), p->rank_, p->param_id_, frame_payload_, cls_});
      p->Finish(frame_status_, tensor, frame_is_dead_);
    }
  }

  // Loop thread: an error frame's rest (u32 code, u32 length, the message, then the payload section
  // unless it is a refusal), moved out of the reader's buffer into error_ only as far as the fields
  // read so far say it reaches, so nothing of the next frame is taken. Checked as the reader thread
  // checked it.
  Parse GatherError(std::string* error) {
    while (true) {
      size_t need = 0;
      const Parse parsed = ParseError(&need, error);
      if (parsed != Parse::kNeedMore) return parsed;
      const size_t n = std::min(reader_.buffered(), need - error_.size());
      if (n == 0) return Parse::kNeedMore;
      error_.append(reader_.data(), n);
      reader_.Consume(n);
    }
  }

  // Parses error_; kNeedMore with `*need` (the bytes error_ must hold at least) until it is whole.
  Parse ParseError(size_t* need, std::string* error) {
    Fields f(error_.data(), error_.size());
    uint32_t code, len;
    if (!f.Get(&code) || !f.Get(&len)) {
      *need = 8;
      return Parse::kNeedMore;
    }
    if (len > kMaxErrorBytes || code == 0 || code > 16) {
      *error = absl::StrCat("malformed error frame (code ", code, ", ", len, " bytes)");
      return Parse::kFailed;
    }
    const char* msg_at = f.Take(len);
    if (msg_at == nullptr) {
      *need = 8 + size_t{len};
      return Parse::kNeedMore;
    }
    if (frame_id_ == kRefusalId) {
      // The producer will not serve this task at all: a permanent error, not a lost flow. (No
      // payload section: a refusal has the same layout in every version.)
      refusal_code_ = static_cast<absl::StatusCode>(code);
      *error = std::string(msg_at, len);
      return Parse::kFailed;
    }
    // The producer's payloads, restored as FromGrpcStatus restores them on gRPC; parsed onto a
    // placeholder until the section is whole, so the message is built once.
    absl::Status payloads(absl::StatusCode::kUnknown, "");
    uint64_t payload_bytes = 0;
    size_t payload_need = 0;
    switch (ParseErrorPayloads(error_.data() + f.at(), error_.size() - f.at(), &payloads, &payload_bytes,
                               &payload_need, error)) {
      case PayloadParse::kNeedMore:
        *need = f.at() + payload_need;
        return Parse::kNeedMore;
      case PayloadParse::kFailed:
        return Parse::kFailed;
      case PayloadParse::kDone:
        break;
    }
    std::string msg(msg_at, len);
    // As TF's gRPC does for every error of a remote call, the message names the remote target
    // (ClusterCoordinator tells a failed PS from a failed worker by it).
    if (msg.find("error information from remote target") == std::string::npos) msg += PeerTag(peer_);
    absl::Status status(static_cast<absl::StatusCode>(code), msg);
    payloads.ForEachPayload(
        [&status](absl::string_view url, const absl::Cord& value) { status.SetPayload(url, value); });
    StartFrame(frame_id_, frame_is_dead_, 16 + 8 + payload_bytes, len);
    frame_status_ = std::move(status);
    error_.clear();
    if (error_.capacity() > FrameReader::kDefaultCapacity) std::string().swap(error_);  // a large one: not kept
    Complete();
    return Parse::kDone;
  }

  // The head of a chunked response: allocates the tensor; its bytes come in chunk frames, each read
  // straight into the buffer at its offset (zero copy, as for a whole response).
  bool StartChunked(uint64_t id, const std::shared_ptr<PendingRecv>& p, tensorflow::DataType dt,
                    const tensorflow::TensorShape& shape, uint64_t nbytes, bool is_dead, uint64_t header_bytes,
                    std::string* error) {
    counters_->bytes_received += header_bytes;
    if (p == nullptr || p->finished()) return true;  // aborted: its chunks are discarded as they come
    if (p->chunked_) {
      *error = absl::StrCat("malformed frame (a second chunked head for request ", id, ")");
      return false;
    }
    Tensor tensor(p->allocator_, dt, shape);
    // Memory TF's allocator may have pooled since our writer sent from it (tsan.h, ClaimBytes).
    if (tensor.IsInitialized()) ClaimBytes(tensor.tensor_data().data(), nbytes);
    if (!tensor.IsInitialized()) {
      Take(id);  // its chunks then find no receive and are discarded
      p->Finish(absl::ResourceExhaustedError(absl::StrCat("Geryon data plane: cannot allocate ", nbytes,
                                                          " bytes for a tensor from ", peer_)),
                Tensor(), false);
      return true;
    }
    p->chunked_ = true;
    p->is_dead_ = is_dead;
    p->tensor_ = std::move(tensor);
    p->expected_ = nbytes;
    p->received_ = 0;
    p->wire_bytes_ = header_bytes;
    if (nbytes == 0) CompleteChunked(p);
    return true;
  }

  // "GRYC" u64 id, u64 offset, u32 len, bytes. A chunk of a receive that is unknown here (aborted,
  // or failed to allocate) is read and dropped; one out of sequence breaks the flow (TCP keeps a
  // connection's bytes in order, so that is a broken peer). `f` is past the magic.
  Parse ParseChunkHead(Fields* f, std::string* error) {
    const char* head = f->Take(20);
    if (head == nullptr) return Parse::kNeedMore;
    uint64_t id, offset;
    uint32_t len;
    std::memcpy(&id, head, 8);
    std::memcpy(&offset, head + 8, 8);
    std::memcpy(&len, head + 16, 4);
    if (len == 0 || len > static_cast<uint64_t>(kMaxChunkBytes)) {
      *error = absl::StrCat("malformed chunk frame (", len, " bytes)");
      return Parse::kFailed;
    }
    reader_.Consume(f->at());
    counters_->bytes_received += 24 + len;
    std::shared_ptr<PendingRecv> p = Find(id);
    if (p != nullptr && !p->finished() && !p->chunked_) {
      *error = absl::StrCat("malformed chunk frame (request ", id, " has no chunked head)");
      return Parse::kFailed;
    }
    Body body;
    body.left = len;
    body.of = BodyOf::kChunk;
    if (p != nullptr && !p->finished()) {
      if (offset != p->received_ || len > p->expected_ - p->received_) {
        *error = absl::StrCat("malformed chunk frame (request ", id, ": ", len, " bytes at offset ", offset, ", ",
                              p->received_, " of ", p->expected_, " received)");
        return Parse::kFailed;
      }
      // An abort meanwhile only finishes the receive: the buffer stays alive in p->tensor_, and p
      // stays pending until its last chunk, so the flow's failure ends it.
      body.dest = const_cast<char*>(p->tensor_.tensor_data().data()) + offset;
      chunk_p_ = std::move(p);
      chunk_len_ = len;
    }
    StartBody(body);
    return Parse::kDone;
  }

  void CompleteChunked(const std::shared_ptr<PendingRecv>& p) {
    Take(p->id_);
    counters_->queue_ns += NowNs() - p->start_ns_;
    counters_->messages_received += 1;
    if (p->unresolved_) {
      counters_->unresolved_bytes += p->wire_bytes_;
      counters_->unresolved_messages += 1;
    }
    Tensor tensor = std::move(p->tensor_);
    p->tensor_ = Tensor();
    if (!p->finished()) LogArrival({NowNs(), p->rank_, p->param_id_, p->expected_, cls_});
    p->Finish(absl::OkStatus(), tensor, p->is_dead_);
  }

  const int fd_;
  const std::string peer_;
  const int cls_;
  std::shared_ptr<FlowCounters> counters_;
  EventLoop* const loop_;  // the transport's; reads this connection from Start to End
  // The loop thread's own (its reads and the frame in progress): no lock.
  FrameReader reader_{fd_};
  State state_ = State::kHead;
  bool ended_ = false;
  Body body_;
  // The response being read: its receive (null: nobody waits), also in taken_ until it completes so
  // that End fails it; what it will be finished with; its size on the wire.
  std::shared_ptr<PendingRecv> frame_p_, taken_;
  uint64_t frame_id_ = 0;
  bool frame_is_dead_ = false;
  uint64_t frame_header_bytes_ = 0, frame_payload_ = 0;
  absl::Status frame_status_;
  Tensor frame_tensor_;
  std::string large_;   // a TensorProto larger than the reader's buffer
  std::string error_;   // an error frame's rest, gathered (GatherError)
  // The chunk in progress: its receive (stays pending: a broken flow fails it with the rest), length.
  std::shared_ptr<PendingRecv> chunk_p_;
  uint32_t chunk_len_ = 0;
  // Set on the loop thread only (before End calls Fail): the code of a refusal frame.
  absl::StatusCode refusal_code_ = absl::StatusCode::kUnavailable;
  Mutex write_mu_;  // held by whoever writes to fd_, and by the close
  bool fd_closed_ TF_GUARDED_BY(write_mu_) = false;
  std::string batch_ TF_GUARDED_BY(write_mu_);  // requests combined from outbox_, being written
  // Bytes of whole request and cancel frames the socket did not take yet (it was full): the loop
  // writes them (Flush) before anything newer, which is appended behind them.
  std::string unsent_ TF_GUARDED_BY(write_mu_);
  // Requests left by other threads while one writes (see Send); out_mu_ is taken alone, or inside
  // write_mu_, never the other way round.
  Mutex out_mu_ TF_ACQUIRED_AFTER(write_mu_);
  bool writing_ TF_GUARDED_BY(out_mu_) = false;
  std::string outbox_ TF_GUARDED_BY(out_mu_);
  Mutex mu_;
  bool broken_ TF_GUARDED_BY(mu_) = false;
  std::string broken_reason_ TF_GUARDED_BY(mu_);
  absl::StatusCode broken_code_ TF_GUARDED_BY(mu_) = absl::StatusCode::kUnavailable;
  std::unordered_map<uint64_t, std::shared_ptr<PendingRecv>> pending_ TF_GUARDED_BY(mu_);
};

void PendingRecv::Abort(const absl::Status& status) {
  // Still pending (its response, or the rest of its chunks, not read yet): tell the producer.
  if (auto conn = conn_.lock()) {
    if (conn->Forget(id_) && !finished()) conn->SendCancel(id_);
  }
  if (!finished() && counters_) counters_->aborted += 1;
  Finish(status, Tensor(), false);
}

// ---- producer side -----------------------------------------------------------------------------

// Host order (sender_order=host): one urgency order per process and class across its producer
// connections. Each connection publishes the rank of its most urgent pending response (queued, half
// sent, or being written); a connection about to start a response or a chunk of rank r yields while
// another connection of the class has published a rank below r. Equal ranks go together; unranked
// (kUnranked) is last by value. Per connection, order inside its own queue is unchanged.
// A more urgent connection whose socket has been full for kStallNs (it waits for EPOLLOUT with a
// response pending: its consumer does not read, or its path is congested) stops holding the others
// back: the order is kept against senders that can send, never at the price of idling the link
// behind a stuck consumer.
constexpr int64_t kNothingPending = std::numeric_limits<int64_t>::max();
constexpr int64_t kStallNs = 100 * 1000 * 1000;
constexpr int64_t kHostPollNs = 5 * 1000 * 1000;  // a yielding connection re-checks (a stall) this often

class HostOrder {
 public:
  static HostOrder& ForClass(int cls) {
    static HostOrder* orders = new HostOrder[kMaxClasses];  // lives as long as the process
    return orders[cls];
  }

  // `blocked_since`: the connection's NowNs() since when its socket is full with a response pending
  // (it waits for EPOLLOUT), 0 otherwise.
  void Publish(const void* conn, int64_t rank, const std::shared_ptr<std::atomic<int64_t>>& blocked_since) {
    std::vector<std::function<void()>> wake;
    {
      MutexLock l(mu_);
      auto it = heads_.find(conn);
      if (rank == kNothingPending) {
        if (it == heads_.end()) return;
        heads_.erase(it);
      } else if (it == heads_.end()) {
        heads_.emplace(conn, Head{rank, blocked_since});
      } else if (it->second.rank == rank) {
        return;
      } else {
        it->second.rank = rank;
      }
      if (watchers_.empty()) return;
      // Something changed: every yielding connection checks again (one-shot, as notify_all was).
      for (auto& [other, f] : watchers_) wake.push_back(std::move(f));
      watchers_.clear();
    }
    for (auto& f : wake) f();  // outside mu_: a wake posts to the event loop
  }

  // True if another connection of the class has a more urgent response pending and can send it.
  bool MoreUrgentElsewhere(const void* conn, int64_t rank) {
    MutexLock l(mu_);
    return MoreUrgentLocked(conn, rank, NowNs());
  }

  // As MoreUrgentElsewhere; when true, `wake` runs (once, on the publishing thread) at the next
  // change any connection of the class publishes, so the yielding connection checks again then
  // (a stall, which publishes nothing, is the caller's timer's: kHostPollNs). Checked and
  // registered under one lock, so no change falls between them.
  bool MoreUrgentElsewhereOrWatch(const void* conn, int64_t rank, const std::function<void()>& wake) {
    MutexLock l(mu_);
    if (!MoreUrgentLocked(conn, rank, NowNs())) return false;
    watchers_[conn] = wake;  // a copy only when yielding
    return true;
  }

  // The connection is closed: no wake for it any more.
  void Unwatch(const void* conn) {
    MutexLock l(mu_);
    watchers_.erase(conn);
  }

 private:
  struct Head {
    int64_t rank;
    std::shared_ptr<std::atomic<int64_t>> blocked_since;
  };

  bool MoreUrgentLocked(const void* conn, int64_t rank, int64_t now) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [other, head] : heads_) {
      if (other == conn || head.rank >= rank) continue;
      const int64_t since = head.blocked_since->load(std::memory_order_relaxed);
      if (since == 0 || now - since < kStallNs) return true;
    }
    return false;
  }

  Mutex mu_;
  std::unordered_map<const void*, Head> heads_ TF_GUARDED_BY(mu_);  // a few connections per class
  std::unordered_map<const void*, std::function<void()>> watchers_ TF_GUARDED_BY(mu_);
};

struct Response {
  uint64_t id;
  absl::Status status;
  Tensor tensor;
  bool is_dead;
  int64_t enqueued_ns;
  // Place in the connection's queue: (rank, seq) in urgency order, (0, seq) in arrival order,
  // fixed when it is queued; seq counts responses per connection, so ties keep arrival order.
  int64_t key_rank = 0;
  uint64_t seq = 0;
  // Sent whole once started, never in preemptible chunks: a gradient push (see ServerConn::push_).
  bool whole = false;
  // Its edge carries no parameter id (the request's kUnresolvedRank): its bytes on the wire, every
  // frame's head included as the consumer counts them, go to the flow's unresolved counters.
  bool unresolved = false;
  uint64_t wire_bytes = 0;
  std::string edge;  // unresolved only: the key's edge name, for the fallback tally (fallback.h)
  // The response as it goes out: `head`, then the tensor's own bytes (or `proto_bytes`). A chunked
  // response (kind 3) sends `head` alone, then chunk frames of at most `chunk_bytes` payload bytes.
  bool encoded = false;
  std::string head, proto_bytes;
  bool raw_payload = false;  // the payload is the tensor's buffer (else proto_bytes, maybe empty)
  bool chunked = false;
  size_t chunk_bytes = 0;
  bool head_sent = false;    // the head's frame is complete on the wire
  size_t payload_done = 0;   // payload bytes whose frames are complete on the wire
  // The frame on the wire now: frame_head, then payload[frame_off, frame_off + frame_len). Once a
  // frame is started it must be finished before anything else is written to the socket.
  bool in_frame = false;
  std::string frame_head;
  size_t frame_off = 0, frame_len = 0, frame_sent = 0;

  // Computed each time, not stored: a view into proto_bytes would dangle once the response moves.
  absl::string_view payload() const { return raw_payload ? tensor.tensor_data() : absl::string_view(proto_bytes); }
  bool started() const { return head_sent || in_frame; }

  Response() = default;
  Response(const Response&) = delete;
  Response& operator=(const Response&) = delete;
  // Our last read of the tensor's bytes is done and our reference goes with `tensor`: TF's
  // allocator may give the memory to a tensor our reader fills next (tsan.h, ReleaseBytes).
  ~Response() {
    if (raw_payload) ReleaseBytes(tensor.tensor_data().data(), tensor.tensor_data().size());
  }
};

// kDone: the response is finished. kMore: a frame finished, more frames follow. kWouldBlock: the
// socket is full. kPaused: the write pass's sends are used up (ServerConn::WritePass). kFailed.
enum class WriteResult { kDone, kMore, kWouldBlock, kPaused, kFailed };

class ServerConn;

// The accepted connections serving each peer task (hello accepted), by the task their hello named,
// so that the transport can close those of a task it forgot (TcpTransport::CloseForgotten: the last
// cluster that named the task, e.g. the coordinator's session, is gone). The event loop thread's
// own, as the connections' reads are: FinishHello lists a connection, End and OnStop unlist it, and
// CloseForgotten runs there through EventLoop::Post; so it needs no lock. Weak references: a
// connection is owned by the loop (and by the closures it posts for the connection), never by this list.
class ServingConns {
 public:
  void Add(const std::string& task, const std::shared_ptr<ServerConn>& conn) { by_task_[task][conn.get()] = conn; }

  void Remove(const std::string& task, const ServerConn* conn) {
    auto it = by_task_.find(task);
    if (it == by_task_.end()) return;
    it->second.erase(conn);
    if (it->second.empty()) by_task_.erase(it);
  }

  std::vector<std::shared_ptr<ServerConn>> Of(const std::string& task) const {
    std::vector<std::shared_ptr<ServerConn>> conns;
    auto it = by_task_.find(task);
    if (it == by_task_.end()) return conns;
    for (const auto& [ptr, weak] : it->second) {
      if (auto conn = weak.lock()) conns.push_back(std::move(conn));
    }
    return conns;
  }

 private:
  std::map<std::string, std::unordered_map<const ServerConn*, std::weak_ptr<ServerConn>>> by_task_;
};

// A producer (accepted) connection. Its reads (the hello, then request and cancel frames) and its
// writes are the transport's event loop's (EventLoop::Handler, on the loop thread only, never
// blocking): a write pass (WritePass) sends what is queued, non-blocking, and waits for EPOLLOUT
// when the socket is full; or the producing thread writes (Enqueue's inline writes, which never
// block either). So an accepted connection costs no thread (until issue 16 two: a reader and a
// writer). Its descriptor is closed by the loop when it lets go of it (Release).
class ServerConn : public EventLoop::Handler, public std::enable_shared_from_this<ServerConn> {
 public:
  ServerConn(int fd, std::string peer_ip, EventLoop* loop, ThreadSet* threads, ServingConns* serving,
             const ClusterView* view, Mutex* view_mu, std::string local_task, ServeFn serve, AbortStepFn abort_step)
      : fd_(fd),
        peer_ip_(std::move(peer_ip)),
        loop_(loop),
        threads_(threads),
        serving_(serving),
        view_(view),
        view_mu_(view_mu),
        local_task_(std::move(local_task)),
        serve_(std::move(serve)),
        abort_step_(std::move(abort_step)),
        accepted_ns_(EventLoop::NowNs()) {}

  int fd() const override { return fd_; }

  // Loop thread: a connection has kHelloTimeoutSeconds from its accept to send its hello.
  void OnAdded() override {
    loop_->SetTimer(this, accepted_ns_ + int64_t{kHelloTimeoutSeconds} * 1000 * 1000 * 1000);
  }

  // Loop thread: one non-blocking recv() of what the socket holds, then every whole frame in the
  // reader's buffer, as the reader thread's blocking loop handled them before (same checks, same
  // errors, same order). A frame not yet whole waits in the buffer for the next wake-up.
  void OnReadable() override {
    std::string error;
    switch (reader_.RecvAvailable(&error)) {
      case FrameReader::Got::kWouldBlock:
        return;
      case FrameReader::Got::kClosed:
        if (phase_ == Phase::kHello) {
          FailHello(error, false, false);
        } else {
          // EOF is the consumer going away (normal at exit); anything else is worth a log line.
          End(error, error != "connection closed by peer");
        }
        return;
      case FrameReader::Got::kData:
        break;
    }
    if (phase_ == Phase::kHello) {
      bool refused = false, not_me = false;
      const Parse parsed = ParseHello(&error, &refused, &not_me);
      if (parsed == Parse::kNeedMore) return;
      if (parsed == Parse::kFailed) {
        FailHello(error, refused, not_me);
        return;
      }
      CheckHello();  // serving, resolving the task's host elsewhere, or refused
    }
    if (phase_ == Phase::kServing) ReadFrames();
  }

  // Loop thread: the hello's deadline (no hello within kHelloTimeoutSeconds: the words the blocking
  // read's SO_RCVTIMEO gave), or, serving, whichever of its two deadlines is due (the loop keeps
  // one per handler, set to the earlier: ArmTimer): the end of a burst hold's gap wait
  // (HoldAfterServe), host order's re-check of a yielding write pass (WritePass).
  void OnTimer() override {
    if (phase_ == Phase::kHello) {
      FailHello("timed out waiting for data", false, false);
      return;
    }
    if (phase_ != Phase::kServing) return;
    const int64_t now = EventLoop::NowNs();
    bool write = false;
    if (host_recheck_ns_ != 0 && host_recheck_ns_ <= now) {
      host_recheck_ns_ = 0;
      write = true;
    }
    if (gap_deadline_ns_ != 0 && gap_deadline_ns_ <= now) {
      gap_deadline_ns_ = 0;
      if (!MoreRequestsReadable()) {  // else the next request's header is there: go on holding
        counters_->gap_waits += 1;
        held_ = 0;
        SetHolding(false);  // schedules a write pass
      }
    }
    ArmTimer();  // the one not due yet, if any
    if (write) WritePass();
  }

  // Loop thread: the socket has room again (or failed) while a write pass waited for it.
  void OnWritable() override { WritePass(); }

  // Loop thread, the loop stopping (the transport is destroyed): queued responses dropped (Close),
  // the descriptor closed.
  void OnStop() override {
    phase_ = Phase::kDone;
    Unlist();
    SetHolding(false);
    Close("the transport is shutting down", false);
    Release();
  }

  // Loop thread (TcpTransport::CloseForgotten): no cluster the transport holds names this
  // connection's task any longer (the last session that named it ended), so the connection is closed
  // the way it is when its consumer goes away (End): queued responses dropped, steps with requests
  // still waiting for their tensor aborted, the descriptor closed. Not an error: nothing is logged
  // here or counted in `errors` (the transport logs one line per task). The consumer sees an
  // ordinary closed flow; its next receive redials and gets the refusal every stranger gets. A
  // connection not serving yet is left alone: its hello is checked against the view when it is read
  // (CheckHello), or again after its lookup (Resolved).
  void CloseForgotten(const std::string& why) {
    if (phase_ != Phase::kServing) return;
    End(why, false);
  }

  void Enqueue(uint64_t id, int32_t rank, bool unresolved, std::string edge, const absl::Status& s, const Tensor& t,
               bool is_dead) {
    {
      MutexLock l(mu_);
      waiting_.erase(id);  // answered: its consumer's going away no longer aborts the step
      // issue 16: its consumer gave it up already
      if (has_cancelled_.load(std::memory_order_acquire) && TakeCancelledLocked(id)) return;
    }
    auto r = std::make_unique<Response>();
    r->id = id;
    r->status = s;
    r->tensor = t;
    r->is_dead = is_dead;
    r->enqueued_ns = NowNs();
    r->key_rank = CurrentResponseOrder() == ResponseOrder::kUrgency ? rank : 0;
    r->whole = push_;
    r->unresolved = unresolved;
    r->edge = std::move(edge);
    // inline=small: a small response with nobody writing and nothing queued goes out now, from the
    // thread that produced it: a hop to the event loop costs more than the write, and with nothing
    // pending there is nothing to order it against. inline=drain: the producing thread queues its
    // response and then writes what is pending, most urgent first. Neither blocks that thread (often
    // TF's own, or the loop itself): what the socket does not take at once, a write pass of the loop
    // finishes. Under host order a more urgent response elsewhere sends it to the queue. An inline
    // writer holds write_mu_, so a write pass that finds it taken leaves: whoever holds write_mu_ here
    // schedules a pass when it lets go with something still queued (ScheduleIfPending).
    InlineWrite mode = g_inline.load(std::memory_order_relaxed);
    // inline=arrival (default): small inline writes in arrival order only; in urgency order every
    // response is queued, so one produced after a burst's hold cannot overtake a more urgent queued one
    // (bench_rendezvous --order --variants: tau >= 0.95 in 57 of 75 steps vs 51 inline, no cost seen).
    if (mode == InlineWrite::kArrival) {
      mode = CurrentResponseOrder() == ResponseOrder::kArrival ? InlineWrite::kSmall : InlineWrite::kOff;
    }
    const bool small = !s.ok() || !t.IsInitialized() || t.TotalBytes() <= kInlineResponseBytes;
    if (mode == InlineWrite::kDrain || (mode == InlineWrite::kSmall && small)) {
      std::unique_lock<Mutex> w(write_mu_, std::try_to_lock);
      if (w.owns_lock()) {
        bool now = false;  // write r at once, outside the queue
        {
          MutexLock l(mu_);
          if (closed_) return;
          r->seq = next_seq_++;
          const bool free = !partial_ && !holding_ && !YieldsLocked(r->key_rank);
          now = mode == InlineWrite::kSmall && free && queue_.empty();
          if (!now) {
            Insert(std::move(r));
            if (mode == InlineWrite::kSmall || !free) w.unlock();
          }
        }
        if (now) {
          write_mu_.AssertHeld();  // `w` holds it: try_lock succeeded, and only the branch above unlocks
          std::string error;
          WriteResult result = WriteFrom(r.get(), /*one_frame=*/false, /*sends_left=*/nullptr, &error);
          if (result == WriteResult::kFailed) {
            w.unlock();
            Close(absl::StrCat("sending a response failed: ", error), true);
            return;
          }
          if (result != WriteResult::kDone) {
            MutexLock l(mu_);
            if (closed_) return;
            // Part of a frame is on the wire: it must be the next thing a write pass sends.
            if (r->in_frame) {
              partial_ = std::move(r);
              PublishLocked();
            } else {
              Insert(std::move(r));
            }
          }
          w.unlock();
          // Also when `r` went out whole: another producing thread may have queued a response while
          // this one held write_mu_, and the pass it scheduled found write_mu_ taken.
          ScheduleIfPending();
          return;
        }
        if (w.owns_lock()) {
          Drain(&w);
          return;
        }
        ScheduleIfPending();
        return;
      }
    }
    bool wake;
    {
      MutexLock l(mu_);
      if (closed_) return;  // the consumer is gone: nobody waits for this tensor
      r->seq = next_seq_++;
      // During a burst hold a pass may send only frames that finish nothing (CandidateLocked):
      // scheduling one for anything else is a pass that sends nothing (SetHolding schedules one
      // when the hold ends). (With the writer thread this cost a futex wake and two context switches.)
      wake = !holding_ || NextFrameIsNotLast(*r);
      Insert(std::move(r));
    }
    if (wake) ScheduleWrite();
  }

 private:
  using Key = std::pair<int64_t, uint64_t>;

  // Under mu_. A std::map keyed (rank, seq): insert and pick-first are O(log n), a few hundred ns
  // for the tens of responses a connection holds (order_ns counts the time, host order's included).
  void Insert(std::unique_ptr<Response> r) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t start = NowNs();
    Key key{r->key_rank, r->seq};
    queue_.emplace(key, std::move(r));
    PublishLocked();
    counters_->order_ns += NowNs() - start;
  }

  // Whether the next frame of `r` leaves it unfinished (a chunked response with more than one
  // chunk to go): sending it during a burst hold completes nothing out of order.
  static bool NextFrameIsNotLast(const Response& r) {
    if (r.encoded) return r.chunked && r.payload_done + r.chunk_bytes < r.payload().size();
    const Tensor& t = r.tensor;
    return r.status.ok() && !r.whole && t.IsInitialized() && tensorflow::DataTypeCanUseMemcpy(t.dtype()) &&
           CurrentResponseOrder() == ResponseOrder::kUrgency &&
           static_cast<int64_t>(t.tensor_data().size()) > ChunkBytes();
  }

  // Under mu_: what a write pass may send next: a frame half on the wire (partial_, returned as
  // queue_.end()), else the most urgent queued response, but during a burst hold only one whose
  // next frame does not finish it. `*found` false: nothing may go now.
  std::map<std::pair<int64_t, uint64_t>, std::unique_ptr<Response>>::iterator CandidateLocked(bool* found)
      TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    *found = true;
    if (partial_) return queue_.end();
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (!holding_ || NextFrameIsNotLast(*it->second)) return it;
    }
    *found = false;
    return queue_.end();
  }

  // Under mu_: the frame in progress, else the candidate (CandidateLocked; nullptr: none). The
  // caller writes it and then calls PutBackLocked.
  std::unique_ptr<Response> Pick() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::unique_ptr<Response> r;
    const int64_t start = NowNs();
    bool found;
    auto it = CandidateLocked(&found);
    if (!found) return nullptr;
    if (partial_) {
      r = std::move(partial_);
    } else {
      r = std::move(it->second);
      queue_.erase(it);
    }
    writing_rank_ = r->key_rank;
    PublishLocked();
    counters_->order_ns += NowNs() - start;
    return r;
  }

  // Under mu_: `r` (picked) was written as far as it goes now: done, or back to the queue (a frame
  // half on the wire: next, as partial_).
  void PutBackLocked(std::unique_ptr<Response> r) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_rank_ = kNothingPending;
    // Cancelled while this frame went out (issue 16): no more chunks of it; a half-sent frame is
    // finished first (nothing else may be written to the socket before it).
    if (r != nullptr && !r->in_frame && TakeCancelledLocked(r->id)) r.reset();
    if (r == nullptr) {
      PublishLocked();
    } else if (r->in_frame) {
      partial_ = std::move(r);
      PublishLocked();
    } else {
      Insert(std::move(r));
    }
  }

  // Under mu_: tells the class's host order this connection's most urgent pending rank.
  void PublishLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t head = writing_rank_;
    if (partial_) head = std::min(head, partial_->key_rank);
    if (!queue_.empty()) head = std::min(head, queue_.begin()->first.first);
    if (closed_) head = kNothingPending;
    if (head == published_) return;
    published_ = head;
    HostOrder::ForClass(cls_).Publish(this, head, blocked_since_);
  }

  // Under mu_: host order is in force and another connection of the class has a more urgent
  // response pending than `rank`: this connection must not start one of `rank` now.
  bool YieldsLocked(int64_t rank) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return CurrentSenderOrder() == SenderOrder::kHost && HostOrder::ForClass(cls_).MoreUrgentElsewhere(this, rank);
  }

  // inline=drain, with the write lock (released on return): writes pending responses one frame at a
  // time, most urgent first, without blocking; leaves the rest to a write pass of the loop.
  void Drain(std::unique_lock<Mutex>* w) {
    write_mu_.AssertHeld();  // `*w` holds it until the unlocks below
    while (true) {
      std::unique_ptr<Response> r;
      {
        MutexLock l(mu_);
        if (closed_) return;
        if (partial_ || holding_ || queue_.empty() || YieldsLocked(queue_.begin()->first.first)) break;
        r = Pick();
      }
      std::string error;
      WriteResult result = WriteOne(r.get(), /*sends_left=*/nullptr, &error);
      if (result == WriteResult::kFailed) {
        w->unlock();
        Close(absl::StrCat("sending a response failed: ", error), true);
        return;
      }
      MutexLock l(mu_);
      if (closed_) return;
      PutBackLocked(result == WriteResult::kDone ? nullptr : std::move(r));
      if (result == WriteResult::kWouldBlock) break;
    }
    w->unlock();
    ScheduleIfPending();
  }

  // Any thread, after letting go of write_mu_ (an inline writer): a write pass for what is still
  // queued, since a pass that ran meanwhile found write_mu_ taken and left it.
  void ScheduleIfPending() {
    bool more;
    {
      MutexLock l(mu_);
      more = !closed_ && (partial_ || !queue_.empty());
    }
    if (more) ScheduleWrite();
  }

  // Any thread: a write pass runs on the loop soon (WritePass), once however many ask before it
  // starts: where the writer thread was woken (a condition variable until issue 16), one closure
  // is posted, not one per response. From the loop thread itself the post costs no wake-up (EventLoop::Post).
  void ScheduleWrite() {
    if (write_scheduled_.exchange(true, std::memory_order_acq_rel)) return;
    loop_->Post([self = shared_from_this()] {
      self->write_scheduled_.store(false, std::memory_order_release);  // before the pass reads the queue
      self->WritePass();
    });
  }

  // The frame bytes of `r` if it is a small response not started yet that goes out whole in one
  // frame (an error, a dead tensor, or a raw tensor of at most kBatchFrameBytes that is never
  // chunked), else 0: what WriteBatch may put behind another response in one sendmsg. An error is
  // sized from its encoded frame: since protocol 5 it carries the Status's payloads too (up to
  // kMaxErrorPayloads x kMaxPayloadValueBytes), which head + message alone would not count. Encoding
  // an error here is safe: its frame depends on the Status only, not on the order or chunk size in
  // force when it is written, and a queued response is touched only under mu_.
  static size_t SmallWholeBytes(Response* r) {
    if (r->started()) return 0;
    const Tensor& t = r->tensor;
    if (!r->status.ok() || (!r->is_dead && !t.IsInitialized())) {  // Encode makes the latter an error
      if (!r->encoded) Encode(r);
      return r->head.size() <= kBatchFrameBytes ? r->head.size() : 0;
    }
    if (!t.IsInitialized()) return kResponseHeadBytes;
    if (!tensorflow::DataTypeCanUseMemcpy(t.dtype())) return 0;
    const size_t nbytes = t.tensor_data().size();
    if (nbytes > kBatchFrameBytes || static_cast<int64_t>(nbytes) > ChunkBytes()) return 0;
    return kResponseHeadBytes + 8 * static_cast<size_t>(t.dims()) + nbytes;
  }

  // Counts `r`, whose last frame just went out (WriteFrom or WriteBatch): one message, and for an
  // unresolved edge (Response::unresolved) its bytes on the wire, every frame's head included. One
  // place for both writers, so the producer's counters cannot drift from the consumer's.
  void FinishResponse(const Response& r) {
    counters_->messages_sent += 1;
    if (r.unresolved) {
      counters_->unresolved_bytes += r.wire_bytes;
      counters_->unresolved_messages += 1;
      NoteUnresolvedSent(local_task_, r.edge, r.wire_bytes, r.payload().size());  // after the counters
    }
  }

  // Whether `r` has frames left after the one just written (a chunked response).
  static bool FrameLeft(const Response& r) { return r.payload_done < r.payload().size(); }

  // Under mu_, after Pick() put a small response into batch_: more queued small responses, in queue
  // order (most urgent first), up to kMaxBatchFrames and ChunkBytes() bytes in all, so a more urgent
  // response that comes meanwhile waits no longer behind a batch than behind one chunk. Not during
  // a burst hold (then only frames that finish nothing may go, CandidateLocked), and under host order
  // not past a rank that another connection of the class is more urgent than.
  void PickBatchLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_, write_mu_) {
    size_t bytes = SmallWholeBytes(batch_.front().get());
    const size_t limit = static_cast<size_t>(ChunkBytes());
    while (batch_.size() < kMaxBatchFrames && !holding_ && !partial_ && !queue_.empty()) {
      auto it = queue_.begin();
      const size_t more = SmallWholeBytes(it->second.get());
      if (more == 0 || bytes + more > limit || YieldsLocked(it->first.first)) break;
      bytes += more;
      batch_.push_back(std::move(it->second));
      queue_.erase(it);
    }
  }

  // With the write lock: the next frame of every response in batch_ (each a whole small response,
  // see PickBatchLocked) in one non-blocking sendmsg of their heads and the tensors' own buffers
  // (no copy; a few more while the socket takes part and `*sends_left` allows). The kernel sends
  // them as a few large segments, so the consumer also reads them with fewer recv() calls and is
  // woken fewer times. kDone: all of them went out. kWouldBlock (the socket is full) or kPaused (the
  // pass's sends are used up): the frames that went out are done, one that went out in part keeps
  // in_frame with its frame_sent (the caller makes it partial_), the rest are as before (in_frame
  // false: back to the queue, unchanged). kFailed with `*error` if the socket failed.
  WriteResult WriteBatch(int* sends_left, std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    ApplyNotsentLowat();
    iov_.clear();
    const int64_t now = NowNs();
    for (auto& r : batch_) {
      if (!r->encoded) Encode(r.get());
      NextFrame(r.get(), r->chunk_bytes);
      iov_.push_back(iovec{r->frame_head.data(), r->frame_head.size()});
      if (r->frame_len > 0) {
        iov_.push_back(iovec{const_cast<char*>(r->payload().data()) + r->frame_off, r->frame_len});
      }
    }
    WriteResult result = WriteResult::kDone;
    size_t next = 0, sent = 0;
    while (next < iov_.size()) {
      if (*sends_left == 0) {
        result = WriteResult::kPaused;
        break;
      }
      msghdr msg{};
      msg.msg_iov = &iov_[next];
      msg.msg_iovlen = iov_.size() - next;
      ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      *sends_left -= 1;
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          result = WriteResult::kWouldBlock;
          break;
        }
        *error = ErrnoText(errno);
        return WriteResult::kFailed;
      }
      NoteProgress();
      sent_total_ += static_cast<uint64_t>(n);
      counters_->bytes_sent += static_cast<uint64_t>(n);
      sent += static_cast<size_t>(n);
      size_t offered = 0;
      for (size_t i = next; i < iov_.size(); ++i) offered += iov_[i].iov_len;
      for (size_t left = static_cast<size_t>(n); left > 0;) {  // past what went out
        iovec& v = iov_[next];
        const size_t took = std::min(left, v.iov_len);
        v.iov_base = static_cast<char*>(v.iov_base) + took;
        v.iov_len -= took;
        left -= took;
        if (v.iov_len == 0) ++next;
      }
      if (static_cast<size_t>(n) < offered) {  // the socket is full now (see WriteFrom)
        result = WriteResult::kWouldBlock;
        break;
      }
    }
    if (sent > 0 && last_unfinished_ && batch_.front()->id != last_id_) counters_->preemptions += 1;
    size_t left = sent;  // what went out, frame by frame in batch order
    for (auto& r : batch_) {
      const size_t total = r->frame_head.size() + r->frame_len;
      if (left == 0) {
        r->in_frame = false;  // nothing of it went out: queued again as it was
        continue;
      }
      counters_->queue_ns += now - r->enqueued_ns;
      last_id_ = r->id;
      if (left < total) {  // half on the wire: it goes on first (partial_)
        r->frame_sent = left;
        r->wire_bytes += left;
        last_unfinished_ = true;
        left = 0;
        continue;
      }
      left -= total;
      r->in_frame = false;
      r->wire_bytes += total;  // all of its frame went out
      if (r->chunked) counters_->chunks_sent += 1;
      r->head_sent = true;
      r->payload_done = r->frame_off + r->frame_len;
      if (!FrameLeft(*r)) FinishResponse(*r);
      last_unfinished_ = FrameLeft(*r);
    }
    return result;
  }

  // With the write lock: one frame of `r` (the rest of a half-sent one, else the next), without
  // blocking, counting a preemption when another response goes out while a chunked one is half
  // sent. Counters move only when some of it went out (a socket full before its first byte leaves
  // `r` as it was, to be tried again).
  WriteResult WriteOne(Response* r, int* sends_left, std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    const bool was_started = r->started();
    const uint64_t wire_before = r->wire_bytes;
    const int64_t now = NowNs();
    const bool preempts = last_unfinished_ && r->id != last_id_;
    WriteResult result = WriteFrom(r, /*one_frame=*/true, sends_left, error);
    if (result == WriteResult::kFailed || r->wire_bytes == wire_before) return result;
    if (preempts) counters_->preemptions += 1;
    if (!was_started) counters_->queue_ns += now - r->enqueued_ns;
    last_id_ = r->id;
    last_unfinished_ = result != WriteResult::kDone;  // a frame or a chunk of it left
    return result;
  }

  // A send made progress: the socket is not stuck (HostOrder's stall detection, blocked_since_).
  void NoteProgress() {
    if (blocked_since_->load(std::memory_order_relaxed) != 0) blocked_since_->store(0, std::memory_order_relaxed);
  }

  void Close(const std::string& why, bool log_error) {
    MutexLock l(mu_);
    if (closed_) return;
    closed_ = true;
    queue_.clear();
    partial_.reset();
    PublishLocked();  // nothing pending: other connections of the class no longer yield to this one
    HostOrder::ForClass(cls_).Unwatch(this);
    if (log_error) {
      LOG(ERROR) << "Geryon data plane: closing the connection from " << peer_ip_ << " ("
                 << (peer_task_.empty() ? "before its hello" : peer_task_) << "): " << why;
      if (counters_) counters_->errors += 1;
    }
    // Ends the reading too: the loop reads EOF and lets the connection go (End), when Close came
    // from a write (a pass's, or an inline writer's on another thread).
    shutdown(fd_, SHUT_RDWR);
  }

  // Tells the consumer why it is refused (RefusalFrame), so that its receives fail with
  // FailedPrecondition (permanent) instead of looking like a lost flow (Unavailable, which TF's
  // ClusterCoordinator retries forever). Best effort: the socket is new and the frame small.
  void WriteRefusal(const std::string& local_task, const std::string& why) {
    const std::string frame = RefusalFrame(local_task, why, absl::StatusCode::kFailedPrecondition);
    MutexLock w(write_mu_);
    ssize_t ignored = send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }

  // Answers a hello: `u32 kHelloAckMagic, u16 n, n bytes` naming this task.
  void WriteAck(const std::string& local_task) {
    std::string frame;
    Put<uint32_t>(&frame, kHelloAckMagic);
    Put<uint16_t>(&frame, static_cast<uint16_t>(local_task.size()));
    frame += local_task;
    MutexLock w(write_mu_);
    ssize_t ignored = send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // new socket: fits
    (void)ignored;
  }

  enum class Parse { kNeedMore, kDone, kFailed };

  // Loop thread: the hello, out of the reader's buffer (kNeedMore until all of it is there; a bad
  // magic is refused after 4 bytes, another version after 6, as the blocking reads did field by
  // field). `*not_me`: the hello is for another task (it probed this port as one of that task's
  // candidates). On kDone the frame is consumed and hello_task_ / hello_cls_ hold what it said.
  Parse ParseHello(std::string* error, bool* refused, bool* not_me) {
    const char* p = reader_.data();
    const size_t have = reader_.buffered();
    uint32_t magic;
    uint16_t version, cls, task_len, target_len;
    if (have < 4) return Parse::kNeedMore;
    std::memcpy(&magic, p, 4);
    if (magic != kHelloMagic) {
      *error = absl::StrCat("malformed hello (bad magic 0x", absl::Hex(magic), ")");
      return Parse::kFailed;
    }
    if (have < 6) return Parse::kNeedMore;
    std::memcpy(&version, p + 4, 2);
    if (version != kProtocolVersion) {
      // Another release of Geryon: refused with both versions named, before reading further (the
      // rest of an unknown version's hello may not be laid out as ours).
      *error = absl::StrCat("refused: the consumer speaks Geryon data-plane protocol version ", version,
                            ", this producer speaks version ", kProtocolVersion,
                            "; run the same Geryon release on every task");
      *refused = true;
      return Parse::kFailed;
    }
    if (have < 10) return Parse::kNeedMore;
    std::memcpy(&cls, p + 6, 2);
    std::memcpy(&task_len, p + 8, 2);
    if (cls >= kMaxClasses || task_len == 0 || task_len > kMaxTaskBytes) {
      *error = absl::StrCat("malformed hello (version ", version, ", class ", cls, ", task name of ", task_len,
                            " bytes)");
      return Parse::kFailed;
    }
    const size_t target_at = 10 + size_t{task_len};
    if (have < target_at + 2) return Parse::kNeedMore;
    std::memcpy(&target_len, p + target_at, 2);
    if (target_len == 0 || target_len > kMaxTaskBytes) {
      *error = absl::StrCat("malformed hello (target task name of ", target_len, " bytes)");
      return Parse::kFailed;
    }
    if (have < target_at + 2 + target_len) return Parse::kNeedMore;
    std::string task(p + 10, task_len), target(p + target_at + 2, target_len);
    reader_.Consume(target_at + 2 + target_len);
    if (target != local_task_) {
      *error = absl::StrCat("the hello is for ", target, ", not for this task");
      *not_me = true;
      return Parse::kFailed;
    }
    hello_task_ = std::move(task);
    hello_cls_ = cls;
    return Parse::kDone;
  }

  // Loop thread, after ParseHello: the task must be of the cluster spec, at the peer's address. Its
  // host's addresses were resolved when the task was learned; one that did not resolve then is
  // looked up again, on a thread of the transport, since DNS may block for seconds and the loop
  // reads every connection (the answer comes back through Post: Resolved).
  void CheckHello() {
    std::string host;
    std::set<std::string> addresses;
    {
      MutexLock l(*view_mu_);
      auto it = view_->tasks.find(hello_task_);
      if (it == view_->tasks.end()) {
        FailHello(absl::StrCat("refused: ", hello_task_, " is not a task of the cluster spec"), true, false);
        return;
      }
      host = it->second.host;
      addresses = it->second.addresses;  // resolved when the task was learned
    }
    if (!addresses.empty()) {
      FinishHello(host, addresses);
      return;
    }
    phase_ = Phase::kResolving;
    loop_->ClearTimer(this);   // as before: the lookup is bounded by the resolver's own timeouts
    loop_->Watch(this, false);  // the consumer sends nothing before the ack
    auto self = shared_from_this();
    EventLoop* loop = loop_;
    if (!threads_->Spawn(
            "geryon_dns", [self, loop, host] {
              std::set<std::string> resolved = ResolveHost(host);
              loop->Post([self, host, resolved] { self->Resolved(host, resolved); });
            },
            [] {})) {  // getaddrinfo cannot be interrupted; Stop joins it when it returns
      Refuse("cannot start a thread to resolve its host (the transport is stopping or out of threads)");
    }
  }

  // Loop thread: the lookup CheckHello started is done. The task is looked up in the view again: it
  // may have been forgotten meanwhile (its session ended), and CloseForgotten does not close a
  // connection that is not serving yet.
  void Resolved(const std::string& host, const std::set<std::string>& addresses) {
    if (phase_ != Phase::kResolving) return;
    loop_->Watch(this, true);
    bool known;
    {
      MutexLock l(*view_mu_);
      known = view_->tasks.count(hello_task_) > 0;
    }
    if (!known) {
      FailHello(absl::StrCat("refused: ", hello_task_, " is not a task of the cluster spec"), true, false);
      return;
    }
    FinishHello(host, addresses);
  }

  // Loop thread: only the host the cluster spec names for that task may speak for it. Accepted: the
  // socket is marked, the hello answered, and requests are read (and their responses written by the
  // loop: no thread is started).
  void FinishHello(const std::string& host, const std::set<std::string>& addresses) {
    if (addresses.count(peer_ip_) == 0) {
      FailHello(absl::StrCat("refused: ", hello_task_, " is at ", host, " in the cluster spec, not at ", peer_ip_),
                true, false);
      return;
    }
    peer_task_ = hello_task_;
    push_ = absl::StartsWith(peer_task_, "/job:ps/");
    cls_ = hello_cls_;
    // Marked before the ack, so every byte this side sends on the flow carries the class's DSCP.
    MarkSocket(fd_, cls_, /*consumer=*/false);
    counters_ = CountersFor("producer", local_task_, peer_task_, cls_);
    counters_->connections += 1;
    counters_->dscp = DscpForClass(cls_);
    counters_->local_port = LocalPort(fd_);
    // What a producing thread reads of it (Enqueue: counters_, push_, cls_) is published by the
    // locks and the loop's queue that bring it the request, all taken after this.
    auto self = shared_from_this();
    // Host order's wake for a yielding write pass (made once: a weak reference, so a class's
    // watchers never keep a closed connection alive).
    wake_ = [weak = std::weak_ptr<ServerConn>(self)] {
      if (auto conn = weak.lock()) conn->ScheduleWrite();
    };
    WriteAck(local_task_);
    phase_ = Phase::kServing;
    serving_->Add(peer_task_, self);  // closed if its task is forgotten (CloseForgotten)
    listed_ = true;
    loop_->ClearTimer(this);  // the hello's deadline
  }

  // Loop thread: off the list of serving connections (End, OnStop).
  void Unlist() {
    if (!listed_) return;
    listed_ = false;
    serving_->Remove(peer_task_, this);
  }

  // Loop thread: the hello fails; the consumer is told why where it can act on it (a refusal frame:
  // FailedPrecondition, permanent; an ack naming this task when it looked for another), then closed.
  void FailHello(const std::string& error, bool refused, bool not_me) {
    if (refused) WriteRefusal(local_task_, error);
    if (not_me) WriteAck(local_task_);  // names this task, so the consumer tries its next candidate
    // A port probe that left, or a consumer looking for another task, is no error.
    End(error, error != "connection closed by peer" && !not_me);
  }

  // Loop thread: out of threads for a hello's host lookup (CheckHello): a transient refusal
  // (Unavailable, as at the connection limit: TF retries it), logged, and closed.
  void Refuse(const std::string& why) {
    const std::string frame =
        RefusalFrame(local_task_, absl::StrCat("refused the connection: ", why), absl::StatusCode::kUnavailable);
    {
      MutexLock w(write_mu_);
      ssize_t ignored = send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // new socket: fits
      (void)ignored;
    }
    End(why, true);
  }

  // Loop thread: the connection's reading ends (EOF, an error, a refused hello): closed (queued
  // responses dropped), no longer watched, and the descriptor closed.
  void End(const std::string& why, bool log_error) {
    const bool serving = phase_ == Phase::kServing;
    phase_ = Phase::kDone;
    Unlist();
    SetHolding(false);
    Close(why, log_error);
    if (serving) AbortWaitingSteps(why);
    loop_->Remove(this);
    Release();
  }

  // Loop thread (End, OnStop, once: the loop calls neither after Remove): closes the descriptor,
  // under the write lock, since an inline writer (Enqueue) may hold it; closed_ is set by then, so
  // no writer touches the descriptor afterwards (its number may be reused at once).
  void Release() {
    if (released_) return;
    released_ = true;
    MutexLock w(write_mu_);
    close(fd_);
    g_accepted -= 1;
  }

  // Loop thread: every whole request and cancel frame in the reader's buffer, in order.
  void ReadFrames() {
    auto self = shared_from_this();
    while (phase_ == Phase::kServing) {
      const char* p = reader_.data();
      const size_t have = reader_.buffered();
      if (have < 4) return;
      uint32_t magic;
      std::memcpy(&magic, p, 4);
      if (magic == kCancelMagic) {
        if (have < 12) return;
        uint64_t cancelled_id;
        std::memcpy(&cancelled_id, p + 4, 8);
        reader_.Consume(12);
        counters_->bytes_received += 12;
        Cancel(cancelled_id);
        continue;
      }
      if (magic != kRequestMagic) {
        End(absl::StrCat("malformed frame (bad magic 0x", absl::Hex(magic), ")"), true);
        return;
      }
      if (have < kRequestHeadBytes) return;
      uint64_t id;
      int64_t step_id;
      int32_t rank;
      uint32_t key_len;
      std::memcpy(&id, p + 4, 8);  // u64 id, i64 step, i32 rank, u32 n
      std::memcpy(&step_id, p + 12, 8);
      std::memcpy(&rank, p + 20, 4);
      std::memcpy(&key_len, p + 24, 4);
      if (key_len == 0 || key_len > kMaxKeyBytes) {
        End(absl::StrCat("malformed request (key of ", key_len, " bytes)"), true);
        return;
      }
      if (have < kRequestHeadBytes + key_len) return;
      const bool unresolved = rank == kUnresolvedRank;  // counted per flow when its response is sent
      if (rank < 0) rank = kUnranked;  // unresolved, or not a rank a consumer sends: no priority
      std::string key(p + kRequestHeadBytes, key_len);
      reader_.Consume(kRequestHeadBytes + key_len);
      counters_->bytes_received += kRequestHeadBytes + key_len;
      counters_->messages_received += 1;
      HoldBeforeServe();
      {
        MutexLock l(mu_);  // waiting until Enqueue: the step is aborted if the consumer goes before
        waiting_.emplace(id, step_id);
      }
      // Serve does not block: TF's RecvLocalAsync runs the callback now if the tensor is there
      // (Enqueue then queues it, or writes a small one without blocking: MSG_DONTWAIT), else later
      // on the thread that produces it; a tensor in device memory is copied asynchronously.
      // The edge name travels for unresolved responses only (the fallback tally); a resolved one
      // carries an empty string, as cheap to move as the flag.
      std::string edge = unresolved ? std::string(EdgeOfKey(key)) : std::string();
      serve_(step_id, key,
             [self, id, rank, unresolved, edge = std::move(edge)](const absl::Status& s, const Tensor& t,
                                                                  bool is_dead) mutable {
               self->Enqueue(id, rank, unresolved, std::move(edge), s, t, is_dead);
             });
      HoldAfterServe();
    }
  }
  // A cancel frame: the consumer gave receive `id` up. Its queued response is dropped, also one half
  // sent in chunks (the queue holds those between frames only); one not produced yet is remembered
  // and dropped when it comes (Enqueue), one being written now stops after its current frame
  // (PutBackLocked). A response sent whole cannot be recalled once its frame started.
  void Cancel(uint64_t id) {
    // Still waiting for its tensor: the consumer's step is over (its receive was aborted), so this
    // task's part of the step is aborted too, as TF's worker does when a RecvTensor call is cancelled.
    // Its response, when TF produces it (an error, then), is dropped as below.
    int64_t step_id = 0;
    bool waiting = false;
    {
      MutexLock l(mu_);
      if (auto it = waiting_.find(id); it != waiting_.end()) {
        step_id = it->second;
        waiting = true;
        waiting_.erase(it);
      }
    }
    if (waiting) AbortStep(step_id, "cancelled a request of the step still waiting for its tensor");
    MutexLock l(mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->second->id == id) {
        queue_.erase(it);
        counters_->cancelled += 1;
        PublishLocked();  // host order: the connection's most urgent pending rank may have changed
        return;
      }
    }
    cancelled_.insert(id);
    while (cancelled_.size() > kMaxCancelled) cancelled_.erase(cancelled_.begin());  // the oldest ids
    has_cancelled_.store(true, std::memory_order_release);
  }

  // Loop thread, the connection's reading over (EOF, reset, an error): every step with a request
  // still waiting for its tensor is aborted, once per step (TF's RecvTensor handler does this when
  // its call is cancelled, which gRPC does when the client's connection goes). Requests already
  // answered do not count: a consumer that leaves with nothing outstanding aborts nothing.
  void AbortWaitingSteps(const std::string& why) {
    std::set<int64_t> steps;
    {
      MutexLock l(mu_);
      for (const auto& [id, step_id] : waiting_) steps.insert(step_id);
      waiting_.clear();
    }
    for (int64_t step_id : steps) {
      AbortStep(step_id, absl::StrCat("went away (", why, ") with requests of the step still waiting"));
    }
  }

  // Loop thread, outside mu_ (the hook logs and hands the abort to a thread of TF's: it does not
  // wait, but no producing thread should wait on mu_ meanwhile).
  void AbortStep(int64_t step_id, const std::string& what) {
    if (!abort_step_) return;
    if (counters_) counters_->steps_aborted += 1;
    abort_step_(step_id, absl::StrCat("the consumer ", peer_task_.empty() ? peer_ip_ : peer_task_, " ", what));
  }

  // Under mu_: whether `id` was cancelled before its response (or its next chunk) was queued; if so
  // it is forgotten and counted.
  bool TakeCancelledLocked(uint64_t id) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cancelled_.empty() || cancelled_.erase(id) == 0) return false;
    has_cancelled_.store(!cancelled_.empty(), std::memory_order_release);
    counters_->cancelled += 1;
    return true;
  }

  // Loop thread. Urgency order: holds the writes while the next request is already readable (see
  // kRequestHeadBytes), so the responses of one burst are ordered together. Ending a hold schedules
  // a write pass (what the hold kept queued; Enqueue schedules none for that).
  void SetHolding(bool hold) {
    {
      MutexLock l(mu_);
      if (holding_ == hold) return;
      holding_ = hold;
    }
    if (!hold && phase_ == Phase::kServing) ScheduleWrite();
  }

  // What the FrameReader already holds counts too: a burst's requests are often in its buffer
  // already, not in the socket (and then no ioctl is needed).
  bool MoreRequestsReadable() {
    const size_t buffered = reader_.buffered();
    if (buffered >= kRequestHeadBytes) return true;
    int available = 0;
    return ioctl(fd_, FIONREAD, &available) == 0 &&
           buffered + static_cast<size_t>(available) >= kRequestHeadBytes;
  }

  // Loop thread, after a request is read and before it is served: holds the writes while a
  // request header more is readable, or (hold_gap_us > 0) while the burst is younger than
  // kBurstWindowNs, in which case HoldAfterServe waits up to the gap for the next request. A
  // consumer's executor issues a step's receives one by one, and under load they trickle in tens
  // of microseconds apart: whatever the producer wrote before the most urgent request was read
  // completed first (bench_rendezvous --order: the first 1 to 9 completions out of rank order
  // in every step whose tau was below 0.95). During a hold a write pass still sends chunks that do
  // not finish their response (CandidateLocked), so the link does not idle behind the hold.
  void HoldBeforeServe() {
    if (gap_deadline_ns_ != 0) {  // the request the gap wait was for came: HoldAfterServe's wait is over
      gap_deadline_ns_ = 0;
      ArmTimer();
    }
    const bool on = CurrentResponseOrder() == ResponseOrder::kUrgency && g_hold.load(std::memory_order_relaxed) &&
                    held_ < kMaxHeldRequests;
    const int64_t now = NowNs();
    if (held_ == 0) burst_start_ns_ = now;
    const bool more = on && MoreRequestsReadable();
    gap_ns_ = g_hold_gap_ns.load(std::memory_order_relaxed);
    const bool complete = CountRequest(now);  // every request counts, held or not
    const bool gap = on && !more && gap_ns_ > 0 && now - burst_start_ns_ < kBurstWindowNs;
    if (gap && complete) counters_->gap_skips += 1;
    gap_wait_ = gap && !complete;
    const bool hold = more || gap_wait_;
    held_ = hold ? held_ + 1 : 0;
    SetHolding(hold);
  }

  // Loop thread: counts a request into its burst (requests less than gap_ns_ apart); true when
  // this burst has as many requests as the larger of the last two had, so no gap wait is needed
  // for this one: a consumer asks a connection for the same receives every step, and without this
  // an isolated request (one tensor per step on a connection) waited the whole gap before its
  // response went (bench_rendezvous: the 1 x 4 KiB step). The larger of two, so a step whose
  // requests a loaded executor split in two bursts still waits for its first part's gap. A burst
  // larger than both gets its later requests served as they come (held only while one more is
  // readable); a smaller one waits the gap, as before; either way its count is remembered.
  bool CountRequest(int64_t now) {
    if (burst_requests_ > 0 && now - last_request_ns_ > gap_ns_) {
      last_bursts_[1] = last_bursts_[0];
      last_bursts_[0] = burst_requests_;
      burst_requests_ = 0;
    }
    ++burst_requests_;
    last_request_ns_ = now;
    const int expected = std::max(last_bursts_[0], last_bursts_[1]);
    return expected > 0 && burst_requests_ >= expected;
  }

  // The gap wait, without blocking the loop (it reads every connection): a deadline gap_ns_ from
  // now, at which OnTimer ends the hold unless a request header is readable by then; the next
  // request read before it (HoldBeforeServe) clears it. Before the event loop the reader thread
  // waited in ppoll for the gap.
  void HoldAfterServe() {
    if (!gap_wait_ || MoreRequestsReadable()) return;
    gap_deadline_ns_ = EventLoop::NowNs() + gap_ns_;
    ArmTimer();
  }

  // Loop thread, serving: the loop's one timer for this connection at the earlier of its two
  // deadlines (the gap wait's, host order's re-check), or none. OnTimer sees which are due.
  void ArmTimer() {
    int64_t at = gap_deadline_ns_;
    if (host_recheck_ns_ != 0 && (at == 0 || host_recheck_ns_ < at)) at = host_recheck_ns_;
    if (at == 0) {
      loop_->ClearTimer(this);
    } else {
      loop_->SetTimer(this, at);
    }
  }

  // Loop thread: what the writer thread (WriteLoop, until issue 16) did, without blocking: the most
  // urgent pending response (CandidateLocked/Pick: a frame half on the wire first; during a burst
  // hold only frames that finish nothing), one frame at a time with a pick between frames, several
  // small responses in one sendmsg (PickBatchLocked/WriteBatch), host order's yield. At most
  // kPassSends sends, so a large response cannot keep the loop from the other connections; then
  // it returns to epoll_wait:
  // - the socket is full: waits for EPOLLOUT (blocked_since_ set: host order's stall detection);
  // - the sends are used up (the socket took them all): another pass after the loop's next poll;
  // - host order yields to a more urgent connection of the class: re-checked when the class
  //   publishes a change (MoreUrgentElsewhereOrWatch's wake) or after kHostPollNs (a stall);
  // - nothing may go (nothing queued, or held): no interest until Enqueue or SetHolding schedules;
  // - an inline writer holds write_mu_: it schedules a pass when it lets go (ScheduleIfPending).
  void WritePass() {
    if (phase_ != Phase::kServing) return;
    std::unique_lock<Mutex> w(write_mu_, std::try_to_lock);
    if (!w.owns_lock()) {
      WantWrite(false);
      return;
    }
    write_mu_.AssertHeld();  // `w` holds it: try_lock succeeded
    int sends_left = kPassSends;
    bool blocked = false, yielding = false;
    while (sends_left > 0) {
      std::unique_ptr<Response> r;
      {
        MutexLock l(mu_);
        if (closed_) return;  // the loop reads EOF and ends the connection (Close shut it down)
        bool found = false;
        auto it = CandidateLocked(&found);
        if (!found) {
          window_ns_ = 0;  // nothing to send: the next busy period measures its own drain rate
          break;
        }
        // Before a response or a chunk starts (a half-sent frame always goes on): yield to a more
        // urgent response of the class on another connection.
        if (!partial_ && CurrentSenderOrder() == SenderOrder::kHost &&
            HostOrder::ForClass(cls_).MoreUrgentElsewhereOrWatch(this, it->first.first, wake_)) {
          if (yield_start_ == 0) {
            yield_start_ = NowNs();
            counters_->host_waits += 1;
          }
          yielding = true;
          break;
        }
        if (yield_start_ != 0) {
          counters_->host_wait_ns += NowNs() - yield_start_;
          yield_start_ = 0;
        }
        r = Pick();
        if (r != nullptr && SmallWholeBytes(r.get()) > 0) {
          batch_.clear();
          batch_.push_back(std::move(r));
          PickBatchLocked();
          if (batch_.size() == 1) {  // nothing to go with it: the usual one-frame write
            r = std::move(batch_.front());
            batch_.clear();
          }
        }
      }
      if (r == nullptr && batch_.empty()) break;
      std::string error;
      WriteResult result;
      if (r == nullptr) {
        // Several small responses, most urgent first: one sendmsg for them all (issue 16).
        result = WriteBatch(&sends_left, &error);
      } else {
        // One frame at a time: between frames the most urgent pending response is picked again.
        result = WriteOne(r.get(), &sends_left, &error);
      }
      if (result == WriteResult::kFailed) {
        batch_.clear();
        w.unlock();
        Close(absl::StrCat("sending a response failed: ", error), true);
        return;
      }
      {
        MutexLock l(mu_);
        if (closed_) {
          batch_.clear();
          return;
        }
        if (r == nullptr) {
          // Done ones go; one half on the wire becomes partial_; untouched ones are queued again.
          for (auto& one : batch_) {
            const bool done = one->head_sent && !one->in_frame && !FrameLeft(*one);
            PutBackLocked(done ? nullptr : std::move(one));
          }
          batch_.clear();
        } else {
          PutBackLocked(result == WriteResult::kDone ? nullptr : std::move(r));
        }
      }
      if (result == WriteResult::kWouldBlock) {
        blocked = true;
        break;
      }
    }
    w.unlock();
    // The socket full with something pending is the connection's stall, as a blocking send was;
    // a pass that ended otherwise found room (or nothing to send): no stall.
    if (!blocked) {
      NoteProgress();
    } else if (blocked_since_->load(std::memory_order_relaxed) == 0) {
      blocked_since_->store(NowNs(), std::memory_order_relaxed);
    }
    WantWrite(blocked);
    // The sends used up and the socket took all of them: the next pass runs after one poll of the
    // other sockets (a deferred post), not on EPOLLOUT. The kernel reports EPOLLOUT only once the
    // bytes queued in the socket have fallen to twice its free room (sk_stream_is_writeable), so a
    // socket that still had room for the next chunk sat idle until it drained that far: 4.5 ms per
    // 100 MB pull spent in epoll_wait between full sendmsg calls, where a blocking sendmsg went on
    // (issue 16, bench/README "the 100 MB pull on the event loop").
    if (!blocked && sends_left == 0) ScheduleWrite();
    if (yielding && host_recheck_ns_ == 0) {
      host_recheck_ns_ = EventLoop::NowNs() + kHostPollNs;
      ArmTimer();
    }
  }

  // Loop thread: EPOLLOUT interest on or off (an epoll_ctl only when it changes).
  void WantWrite(bool on) {
    if (want_write_ == on) return;
    want_write_ = on;
    loop_->WatchWrite(this, on);
  }

  // Encodes the head. Chunked (kind 3) when the order is urgency and the raw payload is larger
  // than the chunk size then in force; arrival order sends every response whole, as before issue 14.
  static void Encode(Response* r) {
    r->encoded = true;
    std::string& head = r->head;
    Put<uint32_t>(&head, kResponseMagic);
    Put<uint64_t>(&head, r->id);
    const Tensor& t = r->tensor;
    absl::Status status = r->status;
    if (status.ok() && !r->is_dead && !t.IsInitialized()) {
      status = absl::InternalError("Geryon data plane: the producer returned an uninitialized tensor");
    }
    if (!status.ok()) {
      std::string msg(status.message().substr(0, kMaxErrorBytes));
      head += std::string{static_cast<char>(kError), 0, 0, 0};
      Put<uint32_t>(&head, static_cast<uint32_t>(status.code()));
      Put<uint32_t>(&head, static_cast<uint32_t>(msg.size()));
      head += msg;
      // TF's payloads travel with the error (as ToGrpcStatus sends them); any past the frame's
      // bounds are left out and logged, since the consumer would refuse the whole frame.
      if (int left_out = AppendErrorPayloads(status, &head); left_out > 0) {
        LOG(WARNING) << "Geryon data plane: " << left_out << " payload(s) of an error for request " << r->id
                     << " exceed the error frame's bounds and were left out: " << status;
      }
    } else if (r->is_dead && !t.IsInitialized()) {
      // A dead tensor carries no value: an empty float tensor with the dead bit.
      head += std::string{static_cast<char>(kRaw), 1, 0, 0};
      Put<uint32_t>(&head, tensorflow::DT_FLOAT);
      Put<uint32_t>(&head, 1);
      Put<int64_t>(&head, 0);
      Put<uint64_t>(&head, 0);
    } else if (tensorflow::DataTypeCanUseMemcpy(t.dtype())) {
      // The tensor's own buffer goes to the socket: sendmsg streams it without a copy here.
      r->raw_payload = true;
      const size_t nbytes = t.tensor_data().size();
      r->chunk_bytes = static_cast<size_t>(ChunkBytes());
      r->chunked = CurrentResponseOrder() == ResponseOrder::kUrgency && !r->whole && nbytes > r->chunk_bytes;
      head += std::string{static_cast<char>(r->chunked ? kRawChunked : kRaw),
                          static_cast<char>(r->is_dead ? 1 : 0), 0, 0};
      Put<uint32_t>(&head, static_cast<uint32_t>(t.dtype()));
      Put<uint32_t>(&head, static_cast<uint32_t>(t.dims()));
      for (int i = 0; i < t.dims(); ++i) Put<int64_t>(&head, t.dim_size(i));
      Put<uint64_t>(&head, nbytes);
    } else {
      // Strings, variants, resources: TF's own encoding, always whole.
      tensorflow::TensorProto proto;
      t.AsProtoTensorContent(&proto);
      proto.SerializeToString(&r->proto_bytes);
      head += std::string{static_cast<char>(kProto), static_cast<char>(r->is_dead ? 1 : 0), 0, 0};
      Put<uint64_t>(&head, r->proto_bytes.size());
    }
  }

  // Sets up the next frame of `r`: the head (with the whole payload unless chunked; with the first
  // chunk when chunked, so a chunked response's first write is one frame pair), else the next
  // chunk, of at most `chunk` payload bytes.
  static void NextFrame(Response* r, size_t chunk) {
    const size_t total = r->payload().size();
    r->in_frame = true;
    r->frame_sent = 0;
    r->frame_off = r->payload_done;
    r->frame_head.clear();
    if (!r->head_sent) {
      r->frame_head = r->head;
      if (!r->chunked) {
        r->frame_len = total;
        return;
      }
    }
    r->frame_len = std::min(chunk, total - r->payload_done);
    Put<uint32_t>(&r->frame_head, kChunkMagic);
    Put<uint64_t>(&r->frame_head, r->id);
    Put<uint64_t>(&r->frame_head, static_cast<uint64_t>(r->frame_off));
    Put<uint32_t>(&r->frame_head, static_cast<uint32_t>(r->frame_len));
  }

  // Sends frames of `r`: all that is left, or (one_frame) the current or next frame only, then
  // kMore if more remain. Non-blocking: stops with kWouldBlock when the socket is full, or kPaused
  // when `*sends_left` sendmsg calls were made (nullptr: no bound); in_frame then says whether a
  // frame is half on the wire.
  WriteResult WriteFrom(Response* r, bool one_frame, int* sends_left, std::string* error)
      TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    if (!r->encoded) Encode(r);
    ApplyNotsentLowat();
    const absl::string_view payload = r->payload();
    while (true) {
      if (!r->in_frame) {
        const size_t chunk = r->chunked ? FrameChunk(r->chunk_bytes) : r->chunk_bytes;
        NextFrame(r, chunk);
        if (r->chunked) counters_->chunk_bytes_last = chunk;
      }
      const size_t frame_total = r->frame_head.size() + r->frame_len;
      while (r->frame_sent < frame_total) {
        iovec iov[2];
        int iovcnt = 0;
        const size_t fh = r->frame_head.size();
        if (r->frame_sent < fh) {
          iov[iovcnt++] = iovec{r->frame_head.data() + r->frame_sent, fh - r->frame_sent};
          if (r->frame_len > 0) {
            iov[iovcnt++] = iovec{const_cast<char*>(payload.data()) + r->frame_off, r->frame_len};
          }
        } else {
          size_t done = r->frame_sent - fh;
          iov[iovcnt++] = iovec{const_cast<char*>(payload.data()) + r->frame_off + done, r->frame_len - done};
        }
        if (sends_left != nullptr) {
          if (*sends_left == 0) {
            if (r->frame_sent == 0) r->in_frame = false;  // nothing of it went out: restart it later
            return WriteResult::kPaused;
          }
          *sends_left -= 1;
        }
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = iovcnt;
        ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (r->frame_sent == 0) r->in_frame = false;  // nothing of it went out: restart it later
            return WriteResult::kWouldBlock;
          }
          *error = ErrnoText(errno);
          return WriteResult::kFailed;
        }
        NoteProgress();  // the socket took bytes: not stalled (HostOrder)
        sent_total_ += static_cast<uint64_t>(n);
        r->frame_sent += static_cast<size_t>(n);
        counters_->bytes_sent += static_cast<uint64_t>(n);  // as it goes: shows a long response's progress
        r->wire_bytes += static_cast<uint64_t>(n);
        // Took part of what was offered: the socket is full now (the kernel set SOCK_NOSPACE, so
        // EPOLLOUT comes when it has room). Another sendmsg now would only fail with EAGAIN.
        const size_t offered = iov[0].iov_len + (iovcnt > 1 ? iov[1].iov_len : 0);
        if (static_cast<size_t>(n) < offered) return WriteResult::kWouldBlock;
      }
      r->in_frame = false;
      if (r->chunked) counters_->chunks_sent += 1;  // every frame of a chunked response is one chunk
      r->head_sent = true;
      r->payload_done = r->frame_off + r->frame_len;
      if (r->payload_done >= payload.size()) {
        FinishResponse(*r);
        return WriteResult::kDone;
      }
      if (one_frame) return WriteResult::kMore;
    }
  }

  // The next chunk's payload bytes (sender option chunk_scale, transport.h): `base` while the
  // connection drains at up to 10 Gbit/s; faster, as many bytes as `base` takes at 10 Gbit/s, so a
  // more urgent response still waits about as long for a chunk boundary, while the per-chunk cost
  // (a pick, a frame head, a sendmsg, a wake-up of the consumer's loop) is paid less often: on
  // loopback (2-3 GB/s) a 100 MB pull took 1.27x [1.21, 1.33] less time than in fixed 256 KiB
  // chunks (bench/README.md, "Chunks sized to the link").
  // The drain rate is what left the socket (what it took less what it still holds, SIOCOUTQ: sent
  // and not yet acknowledged) over windows of at least kDrainWindowNs of one busy period, so
  // neither the socket buffer filling at the start nor an idle spell counts as speed.
  size_t FrameChunk(size_t base) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    if (!g_chunk_scale.load(std::memory_order_relaxed)) return base;
    const int64_t now = NowNs();
    if (window_ns_ == 0) {
      window_ns_ = now;
      window_left_ = Left();
    } else if (now - window_ns_ >= kDrainWindowNs) {
      const uint64_t left = Left();
      const uint64_t drained = left > window_left_ ? left - window_left_ : 0;
      drain_per_ns_ = static_cast<double>(drained) / static_cast<double>(now - window_ns_);
      counters_->drain_bytes_per_s = static_cast<uint64_t>(drain_per_ns_ * 1e9);
      window_ns_ = now;
      window_left_ = left;
    }
    if (drain_per_ns_ <= kChunkBaseBytesPerNs) return base;
    const double cap = std::max(static_cast<double>(base), static_cast<double>(kMaxScaledChunkBytes));
    const double scaled = std::min(cap, static_cast<double>(base) * drain_per_ns_ / kChunkBaseBytesPerNs);
    return std::max(base, static_cast<size_t>(scaled) & ~size_t{4095});  // whole pages, never below base
  }

  // Bytes that have left the socket: taken by sendmsg, less those it still queues (SIOCOUTQ).
  uint64_t Left() TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    int queued = 0;
    if (ioctl(fd_, SIOCOUTQ, &queued) != 0 || queued < 0) queued = 0;
    const uint64_t q = static_cast<uint64_t>(queued);
    return sent_total_ > q ? sent_total_ - q : 0;
  }

  // With the write lock: TCP_NOTSENT_LOWAT as the setting says (checked per write, set on change).
  void ApplyNotsentLowat() TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    const int64_t want = g_notsent_lowat.load(std::memory_order_relaxed);
    if (want == applied_lowat_) return;
    applied_lowat_ = want;
    // 0 resets the socket to the sysctl net.ipv4.tcp_notsent_lowat (tcp_notsent_lowat() in
    // include/net/tcp.h: the socket's value, else the sysctl's, unbounded by default).
    int value = static_cast<int>(want);
    setsockopt(fd_, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &value, sizeof(value));
  }

  const int fd_;
  const std::string peer_ip_;
  // Set at construction, before the accept thread hands the connection to the loop.
  EventLoop* const loop_;
  ThreadSet* const threads_;
  ServingConns* const serving_;  // the transport's; the loop thread's own (see ServingConns)
  const ClusterView* const view_;
  Mutex* const view_mu_;
  const std::string local_task_;
  const ServeFn serve_;
  const AbortStepFn abort_step_;
  const int64_t accepted_ns_;  // EventLoop::NowNs() at the accept: the hello's deadline counts from it
  // The loop thread's own: the reader (sized for the largest frame, a request with a 64 KiB key, so
  // every frame is parsed whole out of its buffer), where the connection is, the hello's fields.
  FrameReader reader_{fd_, kRequestHeadBytes + kMaxKeyBytes};
  enum class Phase { kHello, kResolving, kServing, kDone };
  Phase phase_ = Phase::kHello;
  std::string hello_task_;
  int hello_cls_ = 0;
  // The connection's deadlines, the loop thread's own (0: none; ArmTimer, OnTimer): the burst
  // hold's gap wait (HoldAfterServe), host order's re-check of a yielding write pass (WritePass).
  int64_t gap_deadline_ns_ = 0, host_recheck_ns_ = 0;
  bool listed_ = false;      // in serving_ (from FinishHello until End or OnStop)
  bool released_ = false;    // the descriptor is closed (Release)
  bool want_write_ = false;  // EPOLLOUT interest (WantWrite)
  int64_t yield_start_ = 0;  // host order: when the write passes began yielding (0: they are not)
  std::function<void()> wake_;  // schedules a write pass (host order's watchers; set in FinishHello)
  // A write pass is posted and has not started yet (ScheduleWrite): one closure for any number of
  // responses queued meanwhile.
  std::atomic<bool> write_scheduled_{false};
  std::string peer_task_;
  // The consumer is a parameter server, so every response is a gradient push. Pushes are queued in
  // urgency order but go out whole once started: backprop makes gradients last layer first, and
  // chunk preemption let each newer (more urgent) gradient preempt the older ones, last in first
  // out, so the big late layers were aggregated last and their next pulls could not overlap the
  // pushes (the simulator's grid, bench/README.md "The simulator's modes": 64 cells > 1% behind
  // the best baseline with preempted pushes, 13 with whole ones). TF's PS strategies name the job "ps".
  bool push_ = false;
  int cls_ = 0;
  std::shared_ptr<FlowCounters> counters_;
  Mutex write_mu_;  // whoever writes to the socket holds it (a write pass, or Enqueue's inline write)
  Mutex mu_;
  bool closed_ TF_GUARDED_BY(mu_) = false;
  bool holding_ TF_GUARDED_BY(mu_) = false;  // see SetHolding
  // The burst hold's state, the loop thread's own (HoldBeforeServe).
  int held_ = 0;
  int64_t burst_start_ns_ = 0, gap_ns_ = 0;
  bool gap_wait_ = false;
  // Requests of this burst and of the last two (0: none yet), and when the last came (CountRequest).
  int burst_requests_ = 0;
  int last_bursts_[2] = {0, 0};
  int64_t last_request_ns_ = 0;
  uint64_t next_seq_ TF_GUARDED_BY(mu_) = 0;
  std::map<Key, std::unique_ptr<Response>> queue_ TF_GUARDED_BY(mu_);
  std::unique_ptr<Response> partial_ TF_GUARDED_BY(mu_);  // a frame half on the wire: goes next
  // Host order: the rank of the response being written now (taken out of the queue), the rank
  // this connection last published, and since when its socket is full with a response pending (a
  // write pass waits for EPOLLOUT; 0: it is not).
  int64_t writing_rank_ TF_GUARDED_BY(mu_) = kNothingPending;
  int64_t published_ TF_GUARDED_BY(mu_) = kNothingPending;
  std::shared_ptr<std::atomic<int64_t>> blocked_since_ = std::make_shared<std::atomic<int64_t>>(0);
  // Under write_mu_: the last frame written, whether its response was left unfinished (a chunked
  // one half sent: the next frame of another response is a preemption), the lowat applied.
  uint64_t last_id_ TF_GUARDED_BY(write_mu_) = 0;
  bool last_unfinished_ TF_GUARDED_BY(write_mu_) = false;
  int64_t applied_lowat_ TF_GUARDED_BY(write_mu_) = 0;
  // Chunks scaled to the drain rate (FrameChunk): bytes the socket took, the open window's start
  // (0: none) and the bytes that had left the socket then (Left), the last rate measured (bytes per
  // ns; 0: none yet).
  uint64_t sent_total_ TF_GUARDED_BY(write_mu_) = 0;
  int64_t window_ns_ TF_GUARDED_BY(write_mu_) = 0;
  uint64_t window_left_ TF_GUARDED_BY(write_mu_) = 0;
  double drain_per_ns_ TF_GUARDED_BY(write_mu_) = 0;
  // A write pass's batch (WriteBatch) and its iovecs: members, so a batch allocates nothing.
  std::vector<std::unique_ptr<Response>> batch_ TF_GUARDED_BY(write_mu_);
  std::vector<iovec> iov_ TF_GUARDED_BY(write_mu_);
  std::set<uint64_t> cancelled_ TF_GUARDED_BY(mu_);  // see Cancel; at most kMaxCancelled
  std::atomic<bool> has_cancelled_{false};            // !cancelled_.empty(), read without mu_
  // Requests served and not yet answered (the tensor is still being waited for): id -> step id.
  // Inserted on the loop thread before Serve, erased by Enqueue; a flat map, so no allocation per
  // request once it has grown to the connection's usual number in flight.
  absl::flat_hash_map<uint64_t, int64_t> waiting_ TF_GUARDED_BY(mu_);
};

// ---- the transport -----------------------------------------------------------------------------

class TcpTransport : public Transport {
 public:
  TcpTransport(ClusterView view, int listen_fd) : view_(std::move(view)), listen_fd_(listen_fd) {
    MutexLock l(view_mu_);  // no other thread yet: taken so the guarded members read as guarded
    for (auto& [task, peer] : view_.tasks) peer.addresses = ResolveHost(peer.host);
    server_cluster_ = next_cluster_++;
    clusters_[server_cluster_] = view_.tasks;
    RebuildAllowed();
    SizeAcceptedConnections(static_cast<int64_t>(view_.tasks.size()));
  }

  absl::Status Start(ServeFn serve, AbortStepFn abort_step) override {
    serve_ = std::move(serve);
    abort_step_ = std::move(abort_step);
    // The loop that reads every connection (event_loop.h), before the accept loop and the dials
    // that hand it connections.
    std::string error;
    if (!loop_.Init(&error)) {
      return absl::InternalError(absl::StrCat("Geryon data plane: cannot create its event loop: ", error));
    }
    if (!threads_.Spawn("geryon_loop", [this] { loop_.Run(); }, [this] { loop_.Stop(); })) {
      return absl::ResourceExhaustedError("Geryon data plane: cannot start the event loop's thread");
    }
    threads_.Spawn("geryon_accept", [this] { AcceptLoop(); },
                   [this] {
                     stopping_ = true;
                     shutdown(listen_fd_, SHUT_RDWR);  // accept() returns at once
                   });
    return absl::OkStatus();
  }

  // Never runs in a server (server.cc keeps the transport for the process), but a transport that is
  // destroyed stops and joins every thread it started before its members go.
  ~TcpTransport() override {
    threads_.Stop();
    close(listen_fd_);
  }

  void SetServerCluster(const ClusterView& view) override {
    std::map<std::string, PeerAddress> tasks = Resolved(view);
    std::vector<std::string> forgotten;
    {
      MutexLock l(view_mu_);
      clusters_.erase(server_cluster_);
      server_cluster_ = next_cluster_++;  // learned last: its addresses win
      clusters_[server_cluster_] = std::move(tasks);
      forgotten = RebuildView();
    }
    CloseForgottenSoon(std::move(forgotten));
  }

  uint64_t LearnCluster(const ClusterView& view) override {
    std::map<std::string, PeerAddress> tasks = Resolved(view);
    MutexLock l(view_mu_);
    const uint64_t id = next_cluster_++;
    clusters_[id] = std::move(tasks);
    RebuildView();  // forgets nothing: the view is the union of the clusters held
    return id;
  }

  void ForgetCluster(uint64_t id) override {
    std::vector<std::string> forgotten;
    {
      MutexLock l(view_mu_);
      if (id == server_cluster_ || clusters_.erase(id) == 0) return;
      forgotten = RebuildView();
    }
    CloseForgottenSoon(std::move(forgotten));
  }

  std::shared_ptr<RecvHandle> Recv(const std::string& peer_task, int cls, int64_t step_id, const std::string& key,
                                   tensorflow::Allocator* allocator, RecvDone done) override {
    auto p = std::make_shared<PendingRecv>(allocator, std::move(done));
    // Class (chosen by the rendezvous) and rank come from the same table; the rank travels in the
    // request, so the producer orders by what this consumer's table says.
    const EdgeInfo edge = LookupEdge(EdgeOfKey(key));
    p->unresolved_ = edge.param_id < 0;
    p->rank_ = edge.rank;
    p->param_id_ = edge.param_id;
    if (cls < 0 || cls >= kMaxClasses) cls = kMaxClasses - 1;
    p->cls_ = cls;
    absl::Status s;
    // Null with s ok: the flow is being connected and `p` waits in its queue (sent, or failed,
    // by the dialing thread), so TF's executor thread never waits for a connect.
    std::shared_ptr<ClientConn> conn = Connection(peer_task, cls, p, step_id, key, &s);
    if (!s.ok()) {
      p->Finish(s, Tensor(), false);
      return p;
    }
    if (conn != nullptr) conn->Send(p, step_id, key);
    return p;
  }

 private:
  // A receive issued while its flow was being connected: its request goes out when the connect ends.
  struct Queued {
    std::shared_ptr<PendingRecv> p;
    int64_t step_id;
    std::string key;
  };

  struct Slot {
    Mutex mu;  // guards the flow's state; view_mu_ may be taken inside it, never around it. Never
               // held across a connect (that runs on a thread of the transport, see Connection).
    absl::StatusCode failure_code TF_GUARDED_BY(mu) = absl::StatusCode::kUnavailable;  // kFailedPrecondition: refused
    std::shared_ptr<ClientConn> conn TF_GUARDED_BY(mu);
    // The address of `conn` (a task learned at a new address is redialed).
    std::string dialed_host TF_GUARDED_BY(mu);
    int dialed_port TF_GUARDED_BY(mu) = -1;
    std::chrono::steady_clock::time_point failed_at TF_GUARDED_BY(mu){};
    std::string failure TF_GUARDED_BY(mu);
    // A connect is running; receives meanwhile wait in `queued` (in arrival order).
    bool dialing TF_GUARDED_BY(mu) = false;
    std::vector<Queued> queued TF_GUARDED_BY(mu);
  };

  // The flow's connection when it is up. Otherwise queues `p` on the flow and returns null with
  // `*status` ok: the first such receive starts the connect on a thread of the transport, which
  // then sends (or fails) every queued receive (FinishDial). Null with an error: the peer is not in
  // the cluster, or its connect failed within kFailFastWindow (that error again, at once).
  std::shared_ptr<ClientConn> Connection(const std::string& peer_task, int cls, const std::shared_ptr<PendingRecv>& p,
                                         int64_t step_id, const std::string& key, absl::Status* status) {
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

  // Runs on a thread of the transport: connects the flow (bounded by kConnectDeadline), then
  // hands the result to FinishDial.
  void DialFlow(Slot* slot, const PeerAddress& peer, int cls, const std::string& local_task) {
    std::string error;
    int port = 0;
    bool refused = false;
    absl::StatusCode refusal_code = absl::StatusCode::kFailedPrecondition;
    int fd = Dial(peer, cls, local_task, &error, &port, &refused, &refusal_code);
    FinishDial(slot, peer, cls, local_task, fd, port, refused, refusal_code, error);
  }

  // Records the connect's result on the flow (its connection, or its failure for the fail-fast
  // window), ends `dialing`, and then, without the flow's lock (RecvDone runs TF code), sends
  // every queued receive on the new connection or fails it with the connect's error.
  void FinishDial(Slot* slot, const PeerAddress& peer, int cls, const std::string& local_task, int fd, int port,
                  bool refused, absl::StatusCode refusal_code, const std::string& error) {
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

  // Connects with bounded retries and backoff, within kConnectDeadline in all (then `*error` says
  // so); marks the socket before connect so the SYN carries the class's DSCP too. Each attempt
  // tries the task's data-port candidates in order until the producer that answers the hello is
  // `peer.task`. Returns the descriptor (its port in `*port`), or -1: `*refused` when that task
  // refused the hello (`*refusal_code`: kUnavailable when it is at its connection limit, else
  // kFailedPrecondition, permanent), else nothing answered as it. Runs on a thread of the
  // transport (DialFlow), never on TF's.
  int Dial(const PeerAddress& peer, int cls, const std::string& local_task, std::string* error, int* port,
           bool* refused, absl::StatusCode* refusal_code) {
    std::string hello;
    Put<uint32_t>(&hello, kHelloMagic);
    Put<uint16_t>(&hello, kProtocolVersion);
    Put<uint16_t>(&hello, static_cast<uint16_t>(cls));
    Put<uint16_t>(&hello, static_cast<uint16_t>(local_task.size()));
    hello += local_task;
    Put<uint16_t>(&hello, static_cast<uint16_t>(peer.task.size()));
    hello += peer.task;
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

  // A connected, marked (blocking) socket to host:port, or -1 with `*error`; `*host_failed` when the
  // failure is the host's (no resolution, no answer by `deadline`, unreachable), not the port's
  // (connection refused). The connect itself is non-blocking and waited for in kDialPoll slices, so
  // a silent host (SYNs dropped) costs at most the deadline and a stop is seen at once.
  int Connect(const std::string& host, int port, int cls, std::chrono::steady_clock::time_point deadline,
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

  enum class Answer { kAck, kRefused, kOther };

  // The producer's answer to our hello: an ack naming `task` (ours), a refusal frame (`*error` is
  // its message, `*refusal_code` kUnavailable for a transient one, else kFailedPrecondition), or
  // anything else (another task's ack, another program, silence until kHelloAckTimeoutSeconds or
  // `deadline`, the earlier) -> kOther.
  static Answer ReadAnswer(int fd, const std::string& task, int port, std::chrono::steady_clock::time_point deadline,
                           std::string* error, absl::StatusCode* refusal_code) {
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

  void AcceptLoop() {
    while (true) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stopping_) return;
        if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
        const int err = errno;
        if (err == EMFILE || err == ENFILE) {
          // The connection waits in the backlog; say which limit, and how many flows hold descriptors.
          LOG(ERROR) << "Geryon data plane: accept failed: " << ErrnoText(err) << " ("
                     << (err == EMFILE ? "this process's RLIMIT_NOFILE" : "the system's file-max") << "; "
                     << g_accepted.load() << " data-plane connections are open)";
        } else {
          LOG(ERROR) << "Geryon data plane: accept failed: " << ErrnoText(err);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      std::string ip = NumericHost(reinterpret_cast<sockaddr*>(&ss), len, nullptr);
      if (!AllowedHost(ip)) {
        LOG(ERROR) << "Geryon data plane: refused a connection from " << ip
                     << ": no task of the cluster spec is on that host";
        close(fd);
        continue;
      }
      const int64_t limit = AcceptedConnectionLimit();
      if (g_accepted.load() >= limit) {
        const std::string why = absl::StrCat("refused the connection: this process has ", limit,
                                             " data-plane connections open, its limit (", AcceptedLimitReason(), ")");
        LOG(ERROR) << "Geryon data plane: refused a connection from " << ip << ": " << why;
        // Told to the consumer as a transient refusal (Unavailable), before its hello is read: the
        // frame goes out ahead of our FIN, and the consumer reads it even when its hello, arriving
        // at the closed socket, draws a reset (Linux returns queued data before the error).
        std::string local_task;
        {
          MutexLock l(view_mu_);
          local_task = view_.local_task;
        }
        const std::string frame = RefusalFrame(local_task, why, absl::StatusCode::kUnavailable);
        ssize_t ignored = send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // new socket: fits
        (void)ignored;
        shutdown(fd, SHUT_WR);
        close(fd);
        continue;
      }
      g_accepted += 1;
      std::string local_task;
      {
        MutexLock l(view_mu_);
        local_task = view_.local_task;
      }
      // Read and written by the event loop from now on: it costs no thread.
      auto conn = std::make_shared<ServerConn>(fd, ip, &loop_, &threads_, &serving_, &view_, &view_mu_, local_task,
                                               serve_, abort_step_);
      if (!loop_.Add(std::move(conn))) {  // the transport is stopping
        close(fd);
        g_accepted -= 1;
      }
    }
  }

  // Any thread, without view_mu_: the accepted connections of the tasks just dropped from the view
  // are closed on the event loop's thread, which owns them (CloseForgotten). Not here: TF destroys a
  // session's worker cache (ForgetCluster) on its own threads, which must not wait for the loop.
  void CloseForgottenSoon(std::vector<std::string> forgotten) {
    if (forgotten.empty()) return;
    loop_.Post([this, forgotten = std::move(forgotten)] { CloseForgotten(forgotten); });
  }

  // Loop thread: closes the serving connections whose hello named a task of `tasks`, unless the task
  // is in the view again (a session learned since names it: its connections stay). New connections
  // from a forgotten task are refused at their hello (CheckHello), so after this it has none. A task
  // learned again between the check and the close loses its connections (the consumer redials them
  // and is accepted): a narrow window, preferred to running TF's abort hook under view_mu_.
  void CloseForgotten(const std::vector<std::string>& tasks) {
    for (const std::string& task : tasks) {
      std::string local_task;
      {
        MutexLock l(view_mu_);
        if (view_.tasks.count(task) > 0) continue;
        local_task = view_.local_task;
      }
      std::vector<std::shared_ptr<ServerConn>> conns = serving_.Of(task);
      if (conns.empty()) continue;
      LOG(INFO) << "Geryon data plane: " << local_task << " closes " << conns.size() << " connection(s) from "
                << task << " (no live session's cluster names it)";
      // The words of a waiting step's abort: "the consumer T went away (closed: ...) with requests ...".
      const std::string why = "closed: its task was forgotten, no live session's cluster names it";
      for (auto& conn : conns) conn->CloseForgotten(why);
    }
  }

  // Whether any task of the cluster is at `ip`: the addresses cached when the tasks were learned,
  // plus a fresh lookup of hosts that did not resolve then (none, usually).
  bool AllowedHost(const std::string& ip) {
    std::set<std::string> unresolved;
    {
      MutexLock l(view_mu_);
      if (allowed_.count(ip) > 0) return true;
      for (const auto& [task, peer] : view_.tasks) {
        if (peer.addresses.empty()) unresolved.insert(peer.host);
      }
    }
    for (const auto& host : unresolved) {
      if (ResolveHost(host).count(ip) > 0) return true;
    }
    return false;
  }

  void RebuildAllowed() TF_EXCLUSIVE_LOCKS_REQUIRED(view_mu_) {
    allowed_.clear();
    for (const auto& [task, peer] : view_.tasks) allowed_.insert(peer.addresses.begin(), peer.addresses.end());
  }

  // The tasks of `view` other than the local one, each with its host's addresses: copied from the
  // task's current entry when it is at the same host (the usual case: a session of the same cluster),
  // else resolved here, without the lock (DNS may be slow), once per learned task.
  std::map<std::string, PeerAddress> Resolved(const ClusterView& view) {
    std::map<std::string, PeerAddress> tasks;
    {
      MutexLock l(view_mu_);
      for (const auto& [task, peer] : view.tasks) {
        if (task == view_.local_task) continue;  // our own data port is the one we listen on
        PeerAddress& entry = tasks[task] = peer;
        auto it = view_.tasks.find(task);
        if (it != view_.tasks.end() && it->second.host == peer.host) entry.addresses = it->second.addresses;
      }
    }
    for (auto& [task, peer] : tasks) {
      if (peer.addresses.empty()) peer.addresses = ResolveHost(peer.host);
    }
    return tasks;
  }

  // view_.tasks from the clusters held now: the local task, and every task of a held cluster at its
  // address in the cluster learned last. Logs what was learned, moved or forgotten; a task at a new
  // address is redialed by its next receive (Connection compares the address dialed). Returns the
  // tasks dropped from the view (the caller closes their accepted connections: CloseForgottenSoon).
  std::vector<std::string> RebuildView() TF_EXCLUSIVE_LOCKS_REQUIRED(view_mu_) {
    std::map<std::string, PeerAddress> tasks;
    auto local = view_.tasks.find(view_.local_task);
    if (local != view_.tasks.end()) tasks[local->first] = local->second;
    for (const auto& [id, cluster] : clusters_) {  // ascending: later clusters overwrite
      for (const auto& [task, peer] : cluster) {
        if (task != view_.local_task) tasks[task] = peer;
      }
    }
    for (const auto& [task, peer] : tasks) {
      auto it = view_.tasks.find(task);
      if (it == view_.tasks.end() || it->second.host != peer.host || it->second.data_port != peer.data_port) {
        LOG(INFO) << "Geryon data plane: " << view_.local_task << " learned " << task << " at " << peer.host << ":"
                  << peer.data_port;
      }
    }
    std::vector<std::string> forgotten;
    for (const auto& [task, peer] : view_.tasks) {
      if (tasks.count(task) == 0) {
        LOG(INFO) << "Geryon data plane: " << view_.local_task << " forgot " << task
                  << " (no live session's cluster names it): new connections from it are refused, open ones closed";
        forgotten.push_back(task);
      }
    }
    view_.tasks = std::move(tasks);
    RebuildAllowed();
    SizeAcceptedConnections(static_cast<int64_t>(view_.tasks.size()));  // grows only (more peers, more flows)
    return forgotten;
  }

  Mutex view_mu_;
  ClusterView view_ TF_GUARDED_BY(view_mu_);
  std::set<std::string> allowed_ TF_GUARDED_BY(view_mu_);  // every address of every task in view_
  // The clusters the tasks of view_ come from (by the order they were learned): the server's own and
  // every session's that TF still holds (server.cc: the worker cache's lifetime).
  std::map<uint64_t, std::map<std::string, PeerAddress>> clusters_ TF_GUARDED_BY(view_mu_);
  uint64_t server_cluster_ TF_GUARDED_BY(view_mu_) = 0;
  uint64_t next_cluster_ TF_GUARDED_BY(view_mu_) = 1;
  // Per peer task, one slot per class (found without building a key string per receive).
  std::map<std::string, std::array<std::unique_ptr<Slot>, kMaxClasses>, std::less<>> slots_ TF_GUARDED_BY(view_mu_);
  const int listen_fd_;
  ServeFn serve_;  // set by Start before the accept thread exists, then only read
  AbortStepFn abort_step_;  // likewise
  std::atomic<bool> stopping_{false};
  EventLoop loop_;  // reads and writes every connection, accepted and dialed, on a thread of threads_
  ServingConns serving_;  // the loop thread's own: the serving connections by task (CloseForgotten)
  // Last: destroyed first, so every thread is joined while the members it uses still exist.
  ThreadSet threads_;
};

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

}  // namespace

int DscpForClass(int cls) {
  if (cls < 0 || cls >= kMaxClasses) cls = kMaxClasses - 1;
  return g_dscp[cls].load(std::memory_order_relaxed);
}

int PriorityForClass(int cls) {
  if (cls < 0 || cls >= kMaxClasses) cls = kMaxClasses - 1;
  return g_priority[cls].load(std::memory_order_relaxed);
}

bool SetClassMarks(const int* dscp, const int* priority, int n) {
  if (n < 1 || n > kMaxClasses) return false;
  for (int i = 0; i < n; ++i) {
    if (dscp[i] < 0 || dscp[i] > 63 || priority[i] < 0 || priority[i] > 7) return false;
  }
  for (int i = 0; i < n; ++i) {
    g_dscp[i] = dscp[i];
    g_priority[i] = priority[i];
  }
  return true;
}

ResponseOrder CurrentResponseOrder() { return g_order.load(std::memory_order_relaxed); }

const char* ResponseOrderName(ResponseOrder order) {
  return order == ResponseOrder::kUrgency ? "urgency" : "arrival";
}

bool SetResponseOrder(absl::string_view order, std::string* error) {
  if (order == "urgency") {
    g_order = ResponseOrder::kUrgency;
  } else if (order == "arrival") {
    g_order = ResponseOrder::kArrival;
  } else {
    *error = absl::StrCat("order: '", order, "' is not one of 'urgency', 'arrival'");
    return false;
  }
  return true;
}

int64_t ChunkBytes() { return g_chunk_bytes.load(std::memory_order_relaxed); }

bool SetChunkBytes(int64_t bytes, std::string* error) {
  if (bytes < kMinChunkBytes || bytes > kMaxChunkBytes) {
    *error = absl::StrCat("chunk_bytes: ", bytes, " is not in [", kMinChunkBytes, ", ", kMaxChunkBytes,
                          "] (4 KiB to 1 GiB)");
    return false;
  }
  g_chunk_bytes = bytes;
  return true;
}

SenderOrder CurrentSenderOrder() { return g_sender_order.load(std::memory_order_relaxed); }

namespace {
bool ParseOnOff(absl::string_view value, bool* on) {
  if (value == "on") *on = true;
  else if (value == "off") *on = false;
  else return false;
  return true;
}
}  // namespace

bool SetSenderOption(absl::string_view name, absl::string_view value, std::string* error) {
  if (name == "sender_order") {
    if (value == "connection") g_sender_order = SenderOrder::kConnection;
    else if (value == "host") g_sender_order = SenderOrder::kHost;
    else return *error = absl::StrCat("sender_order: '", value, "' is not one of 'connection', 'host'"), false;
  } else if (name == "hold") {
    bool on;
    if (!ParseOnOff(value, &on)) return *error = absl::StrCat("hold: '", value, "' is not one of 'on', 'off'"), false;
    g_hold = on;
  } else if (name == "inline") {
    if (value == "off") g_inline = InlineWrite::kOff;
    else if (value == "small") g_inline = InlineWrite::kSmall;
    else if (value == "drain") g_inline = InlineWrite::kDrain;
    else if (value == "arrival") g_inline = InlineWrite::kArrival;
    else return *error = absl::StrCat("inline: '", value, "' is not one of 'arrival', 'off', 'small', 'drain'"), false;
  } else if (name == "hold_gap_us") {
    int64_t us;
    if (!absl::SimpleAtoi(value, &us) || us < 0 || us > kMaxHoldGapUs) {
      return *error = absl::StrCat("hold_gap_us: '", value, "' is not a whole number of microseconds in [0, ",
                                   kMaxHoldGapUs, "]"),
             false;
    }
    g_hold_gap_ns = us * 1000;
  } else if (name == "notsent_lowat") {
    int64_t bytes;
    if (!absl::SimpleAtoi(value, &bytes) || bytes < 0 || bytes > kMaxNotsentLowat) {
      return *error = absl::StrCat("notsent_lowat: '", value, "' is not a whole number of bytes in [0, ",
                                   kMaxNotsentLowat, "] (0: the kernel's default)"),
             false;
    }
    g_notsent_lowat = bytes;
  } else if (name == "chunk_scale") {
    if (value == "link") g_chunk_scale = true;
    else if (value == "off") g_chunk_scale = false;
    else return *error = absl::StrCat("chunk_scale: '", value, "' is not one of 'link', 'off'"), false;
  } else {
    return *error = absl::StrCat("sender option: '", name,
                                 "' is not one of 'sender_order', 'hold', 'hold_gap_us', 'inline', 'notsent_lowat', "
                                 "'chunk_scale'"),
           false;
  }
  return true;
}

std::string SenderOption(absl::string_view name) {
  if (name == "sender_order") return g_sender_order.load() == SenderOrder::kHost ? "host" : "connection";
  if (name == "hold") return g_hold.load() ? "on" : "off";
  if (name == "inline") {
    const InlineWrite w = g_inline.load();
    return w == InlineWrite::kOff ? "off" : w == InlineWrite::kSmall ? "small" : w == InlineWrite::kDrain ? "drain" : "arrival";
  }
  if (name == "hold_gap_us") return absl::StrCat(g_hold_gap_ns.load() / 1000);
  if (name == "notsent_lowat") return absl::StrCat(g_notsent_lowat.load());
  if (name == "chunk_scale") return g_chunk_scale.load() ? "link" : "off";
  return "";
}

std::vector<ArrivalRecord> TakeArrivals(int64_t capacity) {
  MutexLock l(g_arrivals_mu);
  std::vector<ArrivalRecord> out;
  out.swap(*g_arrivals);
  g_arrivals_capacity = std::max<int64_t>(0, capacity);
  g_arrivals->reserve(static_cast<size_t>(std::min<int64_t>(g_arrivals_capacity, 1 << 16)));
  g_arrivals_on = g_arrivals_capacity > 0;
  return out;
}

namespace {
// GERYON_ORDER and GERYON_CHUNK_BYTES, read when a server starts; a bad value fails the start
// with a message naming the variable, and changes nothing.
absl::Status OrderSettingsFromEnv() {
  std::string error;
  const char* order = std::getenv("GERYON_ORDER");
  const char* chunk = std::getenv("GERYON_CHUNK_BYTES");
  int64_t bytes = ChunkBytes();
  if (chunk != nullptr && (!absl::SimpleAtoi(chunk, &bytes) || bytes < kMinChunkBytes || bytes > kMaxChunkBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: GERYON_CHUNK_BYTES='", chunk,
                                                   "' is not a whole number of bytes in [", kMinChunkBytes, ", ",
                                                   kMaxChunkBytes, "] (4 KiB to 1 GiB)"));
  }
  if (order != nullptr && std::string(order) != "urgency" && std::string(order) != "arrival") {
    return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: GERYON_ORDER='", order,
                                                   "' is not one of 'urgency', 'arrival'"));
  }
  // The sender settings: every variable checked before any is applied, so a bad one changes nothing.
  const std::pair<const char*, const char*> sender[] = {{"GERYON_SENDER_ORDER", "sender_order"},
                                                        {"GERYON_HOLD", "hold"},
                                                        {"GERYON_HOLD_GAP_US", "hold_gap_us"},
                                                        {"GERYON_INLINE", "inline"},
                                                        {"GERYON_NOTSENT_LOWAT", "notsent_lowat"},
                                                        {"GERYON_CHUNK_SCALE", "chunk_scale"}};
  std::vector<std::pair<std::string, std::string>> apply;
  for (const auto& [var, name] : sender) {
    const char* value = std::getenv(var);
    if (value == nullptr) continue;
    const std::string before = SenderOption(name);
    if (!SetSenderOption(name, value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: ", var, "='", value, "': ", error));
    }
    SetSenderOption(name, before, &error);  // applied below, once all are valid
    apply.emplace_back(name, value);
  }
  FallbackMode fallback = FallbackMode::kOn;
  if (const char* warn = std::getenv("GERYON_FALLBACK_WARN"); warn != nullptr && !ParseFallbackMode(warn, &fallback, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: ", error));
  }
  if (order != nullptr) SetResponseOrder(order, &error);
  SetFallbackMode(fallback);
  SetChunkBytes(bytes, &error);
  for (const auto& [name, value] : apply) SetSenderOption(name, value, &error);
  return absl::OkStatus();
}
}  // namespace

// Why a data port may be taken: a port in the kernel's ephemeral range can be any outgoing
// connection's local port (net.ipv4.ip_local_port_range), which no port picker reserves.
std::string EphemeralNote(int port) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (!(range >> low >> high) || port < low || port > high) return "";
  return absl::StrCat("; it lies in the kernel's ephemeral range ", low, "-", high,
                      " (net.ipv4.ip_local_port_range), where outgoing connections take local ports: pick "
                      "gRPC ports and an offset that put data ports outside it, or reserve them with "
                      "net.ipv4.ip_local_reserved_ports");
}

std::unique_ptr<Transport> NewTcpTransport(const ClusterView& given, absl::Status* status) {
  int64_t max_accepted = 0;  // unset: sized from the cluster
  if (const char* raw = std::getenv(std::string(kMaxAcceptedEnv).c_str()); raw != nullptr) {
    std::string error;
    if (!ParseAcceptedConnectionOverride(raw, &max_accepted, &error)) {  // checked first: a bad one changes nothing
      *status = absl::InvalidArgumentError(absl::StrCat("Geryon data plane: ", error));
      return nullptr;
    }
  }
  *status = OrderSettingsFromEnv();
  if (!status->ok()) return nullptr;
  SetAcceptedConnectionOverride(max_accepted);
  ClusterView view = given;
  std::string error, taken, reserved;
  int fd = -1;
  for (int i = 0; i < kDataPortCandidates && fd < 0; ++i) {
    const int port = DataPortCandidate(given.local_data_port, i);
    if (given.grpc_ports.count(port) > 0) {
      // Some task's gRPC port (ClusterView::grpc_ports): free now perhaps, but its server may bind it
      // later. Consumers still try it in order; a gRPC server there closes on the hello, and they go on.
      absl::StrAppend(&reserved, reserved.empty() ? "" : ", ", port);
      continue;
    }
    fd = Listen(port, &error);
    if (fd >= 0) {
      view.local_data_port = port;
      if (i > 0) {
        LOG(WARNING) << "Geryon data plane: " << view.local_task << " listens on data port " << port << " (candidate "
                     << i << "): "
                     << absl::StrCat(taken.empty() ? "" : absl::StrCat(taken, " taken"),
                                     !taken.empty() && !reserved.empty() ? "; " : "",
                                     reserved.empty() ? "" : absl::StrCat(reserved, " a gRPC port of the cluster spec"));
      }
    } else if (error == strerror(EADDRINUSE)) {
      absl::StrAppend(&taken, taken.empty() ? "" : ", ", port);
    } else {
      break;  // not a taken port: the next candidate would fail alike
    }
  }
  if (fd < 0 && (!taken.empty() || !reserved.empty())) {
    error = absl::StrCat("every candidate is taken (", taken.empty() ? "" : taken,
                         !taken.empty() && !reserved.empty() ? "; " : "",
                         reserved.empty() ? "" : absl::StrCat(reserved, " a gRPC port of the cluster spec"),
                         "; candidate i is the first + i * 1009)");
  }
  if (fd < 0) {
    // Reported at server start, naming the port and the rule, so it is not found later as a
    // receive that cannot connect. Unavailable, as gRPC's own bind failure is.
    *status = absl::UnavailableError(absl::StrCat(
        "Geryon data plane: cannot listen on data port ", view.local_data_port, " for ", view.local_task, ": ",
        error, " (the data port is the task's gRPC port + GERYON_DATA_PORT_OFFSET; pick ports or an offset so it ",
        "is free, e.g. with geryon.tf.ports.free_port_pairs", EphemeralNote(view.local_data_port), ")"));
    return nullptr;
  }
  *status = absl::OkStatus();
  return std::make_unique<TcpTransport>(view, fd);
}

std::vector<ClassSent> ProducerSentByClass() {
  std::vector<ClassSent> by_class;
  for (int cls = 0; cls < kMaxClasses; ++cls) by_class.push_back(ClassSent{cls, 0, 0, 0, 0});
  {
    MutexLock l(g_counters_mu);
    for (auto& [key, c] : *g_counters) {
      if (c->role != "producer" || c->cls < 0 || c->cls >= kMaxClasses) continue;
      ClassSent& s = by_class[c->cls];
      s.bytes += c->bytes_sent.load(std::memory_order_relaxed);
      s.messages += c->messages_sent.load(std::memory_order_relaxed);
      s.unresolved_bytes += c->unresolved_bytes.load(std::memory_order_relaxed);
      s.unresolved_messages += c->unresolved_messages.load(std::memory_order_relaxed);
    }
  }
  std::vector<ClassSent> out;
  for (const ClassSent& s : by_class) {
    if (s.bytes > 0 || s.messages > 0) out.push_back(s);
  }
  return out;
}

uint64_t ProducerBytesSent() {
  uint64_t total = 0;
  MutexLock l(g_counters_mu);
  for (auto& [key, c] : *g_counters) {
    if (c->role == "producer") total += c->bytes_sent.load(std::memory_order_relaxed);
  }
  return total;
}

std::string FlowCountersJson() {
  std::vector<std::shared_ptr<FlowCounters>> all;
  {
    MutexLock l(g_counters_mu);
    for (auto& [key, c] : *g_counters) all.push_back(c);
  }
  std::string out = "[";
  for (size_t i = 0; i < all.size(); ++i) {
    const FlowCounters& c = *all[i];
    if (i > 0) out += ",";
    absl::StrAppend(&out, "{\"role\":", JsonString(c.role), ",\"local_task\":", JsonString(c.local_task),
                    ",\"peer_task\":", JsonString(c.peer_task), ",\"class\":", c.cls, ",\"dscp\":", c.dscp.load(),
                    ",\"local_port\":", c.local_port.load(), ",\"peer_port\":", c.peer_port.load(),
                    ",\"bytes_sent\":", c.bytes_sent.load(), ",\"bytes_received\":", c.bytes_received.load(),
                    ",\"messages_sent\":", c.messages_sent.load(),
                    ",\"messages_received\":", c.messages_received.load(), ",\"queue_ns\":", c.queue_ns.load(),
                    ",\"connections\":", c.connections.load(), ",\"errors\":", c.errors.load(),
                    ",\"aborted\":", c.aborted.load(), ",\"unresolved_bytes\":", c.unresolved_bytes.load(),
                    ",\"unresolved_messages\":", c.unresolved_messages.load(), ",\"order_ns\":", c.order_ns.load(),
                    ",\"chunks_sent\":", c.chunks_sent.load(), ",\"preemptions\":", c.preemptions.load(),
                    ",\"host_waits\":", c.host_waits.load(), ",\"host_wait_ns\":", c.host_wait_ns.load(),
                    ",\"cancels_sent\":", c.cancels_sent.load(), ",\"cancelled\":", c.cancelled.load(),
                    ",\"steps_aborted\":", c.steps_aborted.load(),
                    ",\"requests_combined\":", c.requests_combined.load(), ",\"gap_waits\":", c.gap_waits.load(),
                    ",\"gap_skips\":", c.gap_skips.load(), ",\"chunk_bytes_last\":", c.chunk_bytes_last.load(),
                    ",\"drain_bytes_per_s\":", c.drain_bytes_per_s.load(), "}");
  }
  return out + "]";
}

}  // namespace geryon
