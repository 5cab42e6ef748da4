// The consumer connection's methods (consumer_conn.h).
#include "consumer_conn.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tsl/platform/logging.h"
#include "clock.h"
#include "error_frame.h"
#include "open_flows.h"
#include "sockets.h"

namespace geryon {

static_assert(kMaxChunkFrameBytes == static_cast<uint64_t>(kMaxChunkBytes), "wire_format.h and transport.h agree");

namespace {

// Request ids are unique in the process, not per connection: a request (or its response) left over
// from a connection that failed can never match a receive on the connection that replaced it.
std::atomic<uint64_t> g_next_request_id{1};

}  // namespace

bool TfTensorCheck::ShapeMatches(uint32_t dtype, const int64_t* dims, uint32_t ndims, uint64_t nbytes) const {
  const auto dt = static_cast<tensorflow::DataType>(dtype);
  return tensorflow::TensorShape::BuildTensorShape(absl::Span<const int64_t>(dims, ndims), &shape).ok() &&
         static_cast<uint64_t>(shape.num_elements()) * tensorflow::DataTypeSize(dt) == nbytes;
}

void PendingRecv::Abort(const absl::Status& status) {
  // Still pending (its response, or the rest of its chunks, not read yet): tell the producer.
  if (auto conn = conn_.lock()) {
    if (conn->Forget(id_) && !finished()) conn->SendCancel(id_);
  }
  if (!finished() && counters_) counters_->aborted += 1;
  Finish(status, Tensor(), false);
}

void ClientConn::Start() {
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  // Listed before the loop reads it, so a change of the class marks re-marks it from now on.
  OpenFlowRegistry().Add(fd_, cls_, [counters = counters_](int dscp) {
    if (counters) counters->dscp = dscp;
  });
  if (loop_->Add(shared_from_this())) return;
  Fail("the transport is shutting down");
  MutexLock w(write_mu_);
  fd_closed_ = true;
  OpenFlowRegistry().Close(fd_);
}

void ClientConn::OnReadable() {
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

void ClientConn::Send(const std::shared_ptr<PendingRecv>& p, int64_t step_id, const std::string& key) {
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
  const int32_t rank = p->unresolved_ ? kUnresolvedRank : p->rank_;
  EncodeRequestHead(head, p->id_, step_id, rank, static_cast<uint32_t>(key.size()));
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

void ClientConn::SendCancel(uint64_t id) {
  {
    MutexLock l(mu_);
    if (broken_) return;
  }
  char frame[kCancelFrameBytes];
  EncodeCancel(frame, id);
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

bool ClientConn::WriteLocked(iovec* iov, int iovcnt, std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
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

void ClientConn::Flush() TF_LOCKS_EXCLUDED(write_mu_, mu_) {
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

std::shared_ptr<PendingRecv> ClientConn::Find(uint64_t id) {
  MutexLock l(mu_);
  auto it = pending_.find(id);
  return it == pending_.end() ? nullptr : it->second;
}

std::shared_ptr<PendingRecv> ClientConn::Take(uint64_t id) {
  MutexLock l(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return nullptr;
  auto p = it->second;
  pending_.erase(it);
  return p;
}

void ClientConn::Fail(const std::string& what, std::shared_ptr<PendingRecv> taken,
    absl::StatusCode code) TF_LOCKS_EXCLUDED(mu_) {
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

void ClientConn::End(std::string error) TF_LOCKS_EXCLUDED(write_mu_, mu_) {
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
  OpenFlowRegistry().Close(fd_);  // off the list of flows to re-mark before the number is free
}

bool ClientConn::ReadFrames(std::string* error) {
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

ClientConn::Parse ClientConn::ParseHead(std::string* error) {
  ProducerHead h;  // on the stack: no allocation per response
  const Parse parsed = ParseProducerHead(reader_.data(), reader_.buffered(), check_, &h, error);
  if (parsed != Parse::kDone) return parsed;
  if (h.chunk) return StartChunk(h, error);
  reader_.Consume(h.bytes);
  const uint64_t id = h.id;
  const bool is_dead = h.is_dead;
  if (h.kind == kError) {
    // Its message (up to kMaxErrorBytes) and payloads may not fit the buffer: gathered apart.
    frame_id_ = id;
    frame_is_dead_ = is_dead;
    error_.clear();
    state_ = State::kError;
    return Parse::kDone;
  }
  if (h.kind == kRaw || h.kind == kRawChunked) {
    const uint64_t nbytes = h.nbytes, header_bytes = h.header_bytes;
    const tensorflow::TensorShape& shape = check_.shape;  // what ParseProducerHead checked
    const auto dt = static_cast<tensorflow::DataType>(h.dtype);
    if (h.kind == kRawChunked) {
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
  // kProto (ParseProducerHead refuses any other kind)
  const uint64_t nbytes = h.nbytes;
  std::shared_ptr<PendingRecv> p = StartFrame(id, is_dead, 16 + 8, nbytes);
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

std::shared_ptr<PendingRecv> ClientConn::StartFrame(uint64_t id, bool is_dead, uint64_t header_bytes,
    uint64_t payload) {
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

void ClientConn::FinishBody() {
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
      p->wire_bytes_ += kChunkHeadBytes + chunk_len_;
      if (p->received_ == p->expected_) CompleteChunked(p);
      break;
    }
  }
}

void ClientConn::CompleteProto(const char* bytes) {
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

void ClientConn::Complete() {
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

ClientConn::Parse ClientConn::GatherError(std::string* error) {
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

ClientConn::Parse ClientConn::ParseError(size_t* need, std::string* error) {
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

bool ClientConn::StartChunked(uint64_t id, const std::shared_ptr<PendingRecv>& p, tensorflow::DataType dt,
    const tensorflow::TensorShape& shape, uint64_t nbytes, bool is_dead, uint64_t header_bytes, std::string* error) {
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

ClientConn::Parse ClientConn::StartChunk(const ProducerHead& h, std::string* error) {
  const uint64_t id = h.id, offset = h.offset;
  const uint32_t len = h.len;
  reader_.Consume(h.bytes);
  counters_->bytes_received += kChunkHeadBytes + len;
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

void ClientConn::CompleteChunked(const std::shared_ptr<PendingRecv>& p) {
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

}  // namespace geryon
