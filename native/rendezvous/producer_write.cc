// The producer connection's writes (producer_conn.h): queueing in send order (SendQueue, host
// order), inline writes, the event loop's write pass, batches of small responses, encoding, chunk
// frames and their size (ChunkSizer).
#include "producer_conn.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/framework/types.h"
#include "tsl/platform/logging.h"
#include "clock.h"
#include "error_frame.h"
#include "fallback.h"
#include "sockets.h"

namespace geryon {

void ServerConn::Enqueue(uint64_t id, int32_t rank, bool unresolved, std::string edge, const absl::Status& s,
    const Tensor& t, bool is_dead) {
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
        const bool free = !queue_.has_partial() && !holding_ && !YieldsLocked(r->key_rank);
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
            queue_.Put(std::move(r));
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

void ServerConn::Insert(std::unique_ptr<Response> r) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
  const int64_t start = NowNs();
  queue_.Insert(std::move(r));
  PublishLocked();
  counters_->order_ns += NowNs() - start;
}

bool ServerConn::NextFrameIsNotLast(const Response& r) {
  if (r.encoded) return r.chunked && r.payload_done + r.chunk_bytes < r.payload().size();
  const Tensor& t = r.tensor;
  return r.status.ok() && !r.whole && t.IsInitialized() && tensorflow::DataTypeCanUseMemcpy(t.dtype()) &&
         CurrentResponseOrder() == ResponseOrder::kUrgency &&
         static_cast<int64_t>(t.tensor_data().size()) > ChunkBytes();
}

std::unique_ptr<Response> ServerConn::Pick() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
  const int64_t start = NowNs();
  Response* candidate = CandidateLocked();
  if (candidate == nullptr) return nullptr;
  std::unique_ptr<Response> r = queue_.Take(candidate);
  writing_rank_ = r->key_rank;
  PublishLocked();
  counters_->order_ns += NowNs() - start;
  return r;
}

void ServerConn::PutBackLocked(std::unique_ptr<Response> r) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
  writing_rank_ = kNothingPending;
  // Cancelled while this frame went out (issue 16): no more chunks of it; a half-sent frame is
  // finished first (nothing else may be written to the socket before it).
  if (r != nullptr && !r->in_frame && TakeCancelledLocked(r->id)) r.reset();
  if (r == nullptr) {
    PublishLocked();
  } else if (r->in_frame) {
    queue_.Put(std::move(r));  // goes next (SendQueue's partial frame)
    PublishLocked();
  } else {
    Insert(std::move(r));
  }
}

void ServerConn::PublishLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
  int64_t head = queue_.HeadRank(writing_rank_);
  if (closed_) head = kNothingPending;
  if (head == published_) return;
  published_ = head;
  HostOrder::ForClass(cls_).Publish(this, head, blocked_since_);
}

void ServerConn::Drain(std::unique_lock<Mutex>* w) {
  write_mu_.AssertHeld();  // `*w` holds it until the unlocks below
  while (true) {
    std::unique_ptr<Response> r;
    {
      MutexLock l(mu_);
      if (closed_) return;
      if (queue_.has_partial() || holding_ || queue_.empty() || YieldsLocked(queue_.first_rank())) break;
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

void ServerConn::ScheduleIfPending() {
  bool more;
  {
    MutexLock l(mu_);
    more = !closed_ && queue_.pending();
  }
  if (more) ScheduleWrite();
}

void ServerConn::ScheduleWrite() {
  if (write_scheduled_.exchange(true, std::memory_order_acq_rel)) return;
  loop_->Post([self = shared_from_this()] {
    self->write_scheduled_.store(false, std::memory_order_release);  // before the pass reads the queue
    self->WritePass();
  });
}

size_t ServerConn::SmallWholeBytes(Response* r) {
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

void ServerConn::FinishResponse(const Response& r) {
  counters_->messages_sent += 1;
  if (r.unresolved) {
    counters_->unresolved_bytes += r.wire_bytes;
    counters_->unresolved_messages += 1;
    NoteUnresolvedSent(local_task_, r.edge, r.wire_bytes, r.payload().size());  // after the counters
  }
}

void ServerConn::PickBatchLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_, write_mu_) {
  size_t bytes = SmallWholeBytes(batch_.front().get());
  const size_t limit = static_cast<size_t>(ChunkBytes());
  while (batch_.size() < kMaxBatchFrames && !holding_ && !queue_.has_partial() && !queue_.empty()) {
    Response* next = queue_.first();
    const size_t more = SmallWholeBytes(next);
    if (more == 0 || bytes + more > limit || YieldsLocked(next->key_rank)) break;
    bytes += more;
    batch_.push_back(queue_.Take(next));
  }
}

WriteResult ServerConn::WriteBatch(int* sends_left, std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
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
    if (left < total) {  // half on the wire: it goes on first (the partial frame)
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

WriteResult ServerConn::WriteOne(Response* r, int* sends_left,
    std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
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

void ServerConn::WritePass() {
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
      Response* candidate = CandidateLocked();
      if (candidate == nullptr) {
        chunk_sizer_.Reset();  // nothing to send: the next busy period measures its own drain rate
        break;
      }
      // Before a response or a chunk starts (a half-sent frame always goes on): yield to a more
      // urgent response of the class on another connection.
      if (!queue_.has_partial() && CurrentSenderOrder() == SenderOrder::kHost &&
          HostOrder::ForClass(cls_).MoreUrgentElsewhereOrWatch(this, candidate->key_rank, wake_)) {
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
        // Done ones go; one half on the wire becomes the partial frame; untouched ones are queued again.
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

void ServerConn::WantWrite(bool on) {
  if (want_write_ == on) return;
  want_write_ = on;
  loop_->WatchWrite(this, on);
}

void ServerConn::Encode(Response* r) {
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

void ServerConn::NextFrame(Response* r, size_t chunk) {
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
  AppendChunkHead(&r->frame_head, r->id, static_cast<uint64_t>(r->frame_off), static_cast<uint32_t>(r->frame_len));
}

WriteResult ServerConn::WriteFrom(Response* r, bool one_frame, int* sends_left,
    std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
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

size_t ServerConn::FrameChunk(size_t base) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
  if (!g_chunk_scale.load(std::memory_order_relaxed)) return base;
  bool measured = false;
  const size_t chunk = chunk_sizer_.Next(base, NowNs(), [this] { return Left(); }, &measured);
  if (measured) counters_->drain_bytes_per_s = static_cast<uint64_t>(chunk_sizer_.bytes_per_ns() * 1e9);
  return chunk;
}

uint64_t ServerConn::Left() TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
  int queued = 0;
  if (ioctl(fd_, SIOCOUTQ, &queued) != 0 || queued < 0) queued = 0;
  const uint64_t q = static_cast<uint64_t>(queued);
  return sent_total_ > q ? sent_total_ - q : 0;
}

void ServerConn::ApplyNotsentLowat() TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
  const int64_t want = g_notsent_lowat.load(std::memory_order_relaxed);
  if (want == applied_lowat_) return;
  applied_lowat_ = want;
  // 0 resets the socket to the sysctl net.ipv4.tcp_notsent_lowat (tcp_notsent_lowat() in
  // include/net/tcp.h: the socket's value, else the sysctl's, unbounded by default).
  int value = static_cast<int>(want);
  setsockopt(fd_, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &value, sizeof(value));
}

}  // namespace geryon
