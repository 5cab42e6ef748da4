// The TCP transport (transport.h's Transport): the cluster views it holds, the accept loop, and
// one dialed flow per (peer task, class). Methods: transport.cc (views, accepts, start) and
// dialer.cc (connecting a flow: candidates, hello, retries).
#ifndef GERYON_NATIVE_RENDEZVOUS_TCP_TRANSPORT_H_
#define GERYON_NATIVE_RENDEZVOUS_TCP_TRANSPORT_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "classes.h"
#include "connection_limits.h"
#include "consumer_conn.h"
#include "event_loop.h"
#include "producer_conn.h"
#include "sockets.h"
#include "thread_set.h"
#include "transport.h"
#include "tsan.h"

namespace geryon {

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

  absl::Status Start(ServeFn serve, AbortStepFn abort_step) override;

  // Never runs in a server (server.cc keeps the transport for the process), but a transport that is
  // destroyed stops and joins every thread it started before its members go.
  ~TcpTransport() override {
    threads_.Stop();
    close(listen_fd_);
  }

  void SetServerCluster(const ClusterView& view) override;

  uint64_t LearnCluster(const ClusterView& view) override;

  void ForgetCluster(uint64_t id) override;

  std::shared_ptr<RecvHandle> Recv(const std::string& peer_task, int cls, int64_t step_id, const std::string& key,
                                   tensorflow::Allocator* allocator, RecvDone done) override;

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
                                         int64_t step_id, const std::string& key, absl::Status* status);

  // Runs on a thread of the transport: connects the flow (bounded by kConnectDeadline), then
  // hands the result to FinishDial.
  void DialFlow(Slot* slot, const PeerAddress& peer, int cls, const std::string& local_task);

  // Records the connect's result on the flow (its connection, or its failure for the fail-fast
  // window), ends `dialing`, and then, without the flow's lock (RecvDone runs TF code), sends
  // every queued receive on the new connection or fails it with the connect's error.
  void FinishDial(Slot* slot, const PeerAddress& peer, int cls, const std::string& local_task, int fd, int port,
                  bool refused, absl::StatusCode refusal_code, const std::string& error);

  // Connects with bounded retries and backoff, within kConnectDeadline in all (then `*error` says
  // so); marks the socket before connect so the SYN carries the class's DSCP too. Each attempt
  // tries the task's data-port candidates in order until the producer that answers the hello is
  // `peer.task`. Returns the descriptor (its port in `*port`), or -1: `*refused` when that task
  // refused the hello (`*refusal_code`: kUnavailable when it is at its connection limit, else
  // kFailedPrecondition, permanent), else nothing answered as it. Runs on a thread of the
  // transport (DialFlow), never on TF's.
  int Dial(const PeerAddress& peer, int cls, const std::string& local_task, std::string* error, int* port,
           bool* refused, absl::StatusCode* refusal_code);

  // A connected, marked (blocking) socket to host:port, or -1 with `*error`; `*host_failed` when the
  // failure is the host's (no resolution, no answer by `deadline`, unreachable), not the port's
  // (connection refused). The connect itself is non-blocking and waited for in kDialPoll slices, so
  // a silent host (SYNs dropped) costs at most the deadline and a stop is seen at once.
  int Connect(const std::string& host, int port, int cls, std::chrono::steady_clock::time_point deadline,
              std::string* error, bool* host_failed);

  enum class Answer { kAck, kRefused, kOther };

  // The producer's answer to our hello: an ack naming `task` (ours), a refusal frame (`*error` is
  // its message, `*refusal_code` kUnavailable for a transient one, else kFailedPrecondition), or
  // anything else (another task's ack, another program, silence until kHelloAckTimeoutSeconds or
  // `deadline`, the earlier) -> kOther.
  static Answer ReadAnswer(int fd, const std::string& task, int port, std::chrono::steady_clock::time_point deadline,
                           std::string* error, absl::StatusCode* refusal_code);

  void AcceptLoop();

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
  void CloseForgotten(const std::vector<std::string>& tasks);

  // Whether any task of the cluster is at `ip`: the addresses cached when the tasks were learned,
  // plus a fresh lookup of hosts that did not resolve then (none, usually).
  bool AllowedHost(const std::string& ip);

  void RebuildAllowed() TF_EXCLUSIVE_LOCKS_REQUIRED(view_mu_) {
    allowed_.clear();
    for (const auto& [task, peer] : view_.tasks) allowed_.insert(peer.addresses.begin(), peer.addresses.end());
  }

  // The tasks of `view` other than the local one, each with its host's addresses: copied from the
  // task's current entry when it is at the same host (the usual case: a session of the same cluster),
  // else resolved here, without the lock (DNS may be slow), once per learned task.
  std::map<std::string, PeerAddress> Resolved(const ClusterView& view);

  // view_.tasks from the clusters held now: the local task, and every task of a held cluster at its
  // address in the cluster learned last. Logs what was learned, moved or forgotten; a task at a new
  // address is redialed by its next receive (Connection compares the address dialed). Returns the
  // tasks dropped from the view (the caller closes their accepted connections: CloseForgottenSoon).
  std::vector<std::string> RebuildView() TF_EXCLUSIVE_LOCKS_REQUIRED(view_mu_);

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

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_TCP_TRANSPORT_H_
