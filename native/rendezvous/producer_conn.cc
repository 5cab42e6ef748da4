// The producer connection's hello, reads, cancels, burst hold and closing (producer_conn.h; its
// writes are producer_write.cc).
#include "producer_conn.h"

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tsl/platform/logging.h"
#include "classes.h"
#include "clock.h"
#include "open_flows.h"
#include "sockets.h"

namespace geryon {

static_assert(kWireClasses == kMaxClasses, "wire_format.h and classes.h agree");

void ServerConn::OnReadable() {
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

void ServerConn::OnTimer() {
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
      hold_.End();
      SetHolding(false);  // schedules a write pass
    }
  }
  ArmTimer();  // the one not due yet, if any
  if (write) WritePass();
}

void ServerConn::OnStop() {
  phase_ = Phase::kDone;
  Unlist();
  SetHolding(false);
  Close("the transport is shutting down", false);
  Release();
}

void ServerConn::Close(const std::string& why, bool log_error) {
  MutexLock l(mu_);
  if (closed_) return;
  closed_ = true;
  queue_.Clear();
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

void ServerConn::WriteRefusal(const std::string& local_task, const std::string& why) {
  const std::string frame = RefusalFrame(local_task, why, static_cast<uint32_t>(absl::StatusCode::kFailedPrecondition));
  MutexLock w(write_mu_);
  ssize_t ignored = send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

void ServerConn::WriteAck(const std::string& local_task) {
  const std::string frame = HelloAckFrame(local_task);
  MutexLock w(write_mu_);
  ssize_t ignored = send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // new socket: fits
  (void)ignored;
}

ServerConn::Parse ServerConn::ParseHello(std::string* error, bool* refused, bool* not_me) {
  Hello hello;
  const Parse parsed = geryon::ParseHello(reader_.data(), reader_.buffered(), &hello, error, refused);
  if (parsed != Parse::kDone) return parsed;
  reader_.Consume(hello.bytes);
  if (hello.target != local_task_) {
    *error = absl::StrCat("the hello is for ", hello.target, ", not for this task");
    *not_me = true;
    return Parse::kFailed;
  }
  hello_task_ = std::move(hello.task);
  hello_cls_ = hello.cls;
  return Parse::kDone;
}

void ServerConn::CheckHello() {
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

void ServerConn::Resolved(const std::string& host, const std::set<std::string>& addresses) {
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

void ServerConn::FinishHello(const std::string& host, const std::set<std::string>& addresses) {
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
  // Listed for live re-marking (a change of the class marks reaches this open flow too).
  OpenFlowRegistry().Add(fd_, cls_, [counters = counters_](int dscp) { counters->dscp = dscp; });
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

void ServerConn::Unlist() {
  if (!listed_) return;
  listed_ = false;
  serving_->Remove(peer_task_, this);
}

void ServerConn::FailHello(const std::string& error, bool refused, bool not_me) {
  if (refused) WriteRefusal(local_task_, error);
  if (not_me) WriteAck(local_task_);  // names this task, so the consumer tries its next candidate
  // A port probe that left, or a consumer looking for another task, is no error.
  End(error, error != "connection closed by peer" && !not_me);
}

void ServerConn::Refuse(const std::string& why) {
  const std::string frame =
      RefusalFrame(local_task_, absl::StrCat("refused the connection: ", why),
                   static_cast<uint32_t>(absl::StatusCode::kUnavailable));
  {
    MutexLock w(write_mu_);
    ssize_t ignored = send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // new socket: fits
    (void)ignored;
  }
  End(why, true);
}

void ServerConn::End(const std::string& why, bool log_error) {
  const bool serving = phase_ == Phase::kServing;
  phase_ = Phase::kDone;
  Unlist();
  SetHolding(false);
  Close(why, log_error);
  if (serving) AbortWaitingSteps(why);
  loop_->Remove(this);
  Release();
}

void ServerConn::Release() {
  if (released_) return;
  released_ = true;
  MutexLock w(write_mu_);
  OpenFlowRegistry().Close(fd_);  // off the list of flows to re-mark before the number is free
  g_accepted -= 1;
}

void ServerConn::ReadFrames() {
  auto self = shared_from_this();
  while (phase_ == Phase::kServing) {
    ConsumerFrame frame;
    std::string error;
    const Parse parsed = ParseConsumerFrame(reader_.data(), reader_.buffered(), &frame, &error);
    if (parsed == Parse::kNeedMore) return;
    if (parsed == Parse::kFailed) {
      End(error, true);
      return;
    }
    if (frame.cancel) {
      reader_.Consume(frame.bytes);
      counters_->bytes_received += frame.bytes;
      Cancel(frame.id);
      continue;
    }
    const uint64_t id = frame.id;
    const int64_t step_id = frame.step_id;
    int32_t rank = frame.rank;
    const bool unresolved = rank == kUnresolvedRank;  // counted per flow when its response is sent
    if (rank < 0) rank = kUnranked;  // unresolved, or not a rank a consumer sends: no priority
    std::string key(frame.key, frame.key_len);
    reader_.Consume(frame.bytes);
    counters_->bytes_received += frame.bytes;
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

void ServerConn::Cancel(uint64_t id) {
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
  if (queue_.Remove(id)) {
    counters_->cancelled += 1;
    PublishLocked();  // host order: the connection's most urgent pending rank may have changed
    return;
  }
  cancelled_.insert(id);
  while (cancelled_.size() > kMaxCancelled) cancelled_.erase(cancelled_.begin());  // the oldest ids
  has_cancelled_.store(true, std::memory_order_release);
}

void ServerConn::AbortWaitingSteps(const std::string& why) {
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

void ServerConn::AbortStep(int64_t step_id, const std::string& what) {
  if (!abort_step_) return;
  if (counters_) counters_->steps_aborted += 1;
  abort_step_(step_id, absl::StrCat("the consumer ", peer_task_.empty() ? peer_ip_ : peer_task_, " ", what));
}

bool ServerConn::TakeCancelledLocked(uint64_t id) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
  if (cancelled_.empty() || cancelled_.erase(id) == 0) return false;
  has_cancelled_.store(!cancelled_.empty(), std::memory_order_release);
  counters_->cancelled += 1;
  return true;
}

void ServerConn::SetHolding(bool hold) {
  {
    MutexLock l(mu_);
    if (holding_ == hold) return;
    holding_ = hold;
  }
  if (!hold && phase_ == Phase::kServing) ScheduleWrite();
}

bool ServerConn::MoreRequestsReadable() {
  const size_t buffered = reader_.buffered();
  if (buffered >= kRequestHeadBytes) return true;
  int available = 0;
  return ioctl(fd_, FIONREAD, &available) == 0 &&
         buffered + static_cast<size_t>(available) >= kRequestHeadBytes;
}

void ServerConn::HoldBeforeServe() {
  if (gap_deadline_ns_ != 0) {  // the request the gap wait was for came: HoldAfterServe's wait is over
    gap_deadline_ns_ = 0;
    ArmTimer();
  }
  const bool enabled =
      CurrentResponseOrder() == ResponseOrder::kUrgency && g_hold.load(std::memory_order_relaxed);
  const BurstHold::Decision d = hold_.OnRequest(NowNs(), enabled, g_hold_gap_ns.load(std::memory_order_relaxed),
                                                [this] { return MoreRequestsReadable(); });
  if (d.gap_skipped) counters_->gap_skips += 1;
  SetHolding(d.hold);
}

void ServerConn::HoldAfterServe() {
  if (!hold_.gap_wait() || MoreRequestsReadable()) return;
  gap_deadline_ns_ = EventLoop::NowNs() + hold_.gap_ns();
  ArmTimer();
}

void ServerConn::ArmTimer() {
  int64_t at = gap_deadline_ns_;
  if (host_recheck_ns_ != 0 && (at == 0 || host_recheck_ns_ < at)) at = host_recheck_ns_;
  if (at == 0) {
    loop_->ClearTimer(this);
  } else {
    loop_->SetTimer(this, at);
  }
}

}  // namespace geryon
