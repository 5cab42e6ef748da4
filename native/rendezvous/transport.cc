// TCP data plane: one connection per (consumer task, producer task, class), made lazily by the
// consumer. The consumer writes small request frames; the producer answers on the same connection
// with the tensor bytes. Both ends mark the socket with the class's DSCP and priority, so the bulk
// direction (producer -> consumer) carries the class mark too. Wire format: wire_format.h and
// README.md; the files of the transport: README.md, "File map".
//
// This file: the transport's start, its cluster views, the accept loop, and NewTcpTransport.
#include "transport.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "connection_limits.h"
#include "flow_counters.h"
#include "settings.h"
#include "sockets.h"
#include "tcp_transport.h"
#include "wire_format.h"

namespace geryon {

absl::Status TcpTransport::Start(ServeFn serve, AbortStepFn abort_step) {
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

void TcpTransport::SetServerCluster(const ClusterView& view) {
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

uint64_t TcpTransport::LearnCluster(const ClusterView& view) {
  std::map<std::string, PeerAddress> tasks = Resolved(view);
  MutexLock l(view_mu_);
  const uint64_t id = next_cluster_++;
  clusters_[id] = std::move(tasks);
  RebuildView();  // forgets nothing: the view is the union of the clusters held
  return id;
}

void TcpTransport::ForgetCluster(uint64_t id) {
  std::vector<std::string> forgotten;
  {
    MutexLock l(view_mu_);
    if (id == server_cluster_ || clusters_.erase(id) == 0) return;
    forgotten = RebuildView();
  }
  CloseForgottenSoon(std::move(forgotten));
}

std::shared_ptr<RecvHandle> TcpTransport::Recv(const std::string& peer_task, int cls, int64_t step_id,
    const std::string& key, tensorflow::Allocator* allocator, RecvDone done) {
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

void TcpTransport::AcceptLoop() {
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
      const std::string frame = RefusalFrame(local_task, why, static_cast<uint32_t>(absl::StatusCode::kUnavailable));
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

void TcpTransport::CloseForgotten(const std::vector<std::string>& tasks) {
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

bool TcpTransport::AllowedHost(const std::string& ip) {
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

std::map<std::string, PeerAddress> TcpTransport::Resolved(const ClusterView& view) {
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

std::vector<std::string> TcpTransport::RebuildView() TF_EXCLUSIVE_LOCKS_REQUIRED(view_mu_) {
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

}  // namespace geryon
