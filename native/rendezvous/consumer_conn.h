// The consumer side of a flow: a dialed connection (ClientConn) and its pending receives
// (PendingRecv). Requests out, responses in, parsed as they arrive on the event loop.
#ifndef GERYON_NATIVE_RENDEZVOUS_CONSUMER_CONN_H_
#define GERYON_NATIVE_RENDEZVOUS_CONSUMER_CONN_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "classes.h"
#include "event_loop.h"
#include "flow_counters.h"
#include "frame_reader.h"
#include "transport.h"
#include "tsan.h"
#include "wire_format.h"

namespace geryon {

using tensorflow::Tensor;

// What a response head's dtype and shape must be (wire_format.h TensorCheck), in TF's terms. The
// shape checked last is kept: the tensor is allocated with it.
class TfTensorCheck : public TensorCheck {
 public:
  bool RawDtype(uint32_t dtype) const override {
    return tensorflow::DataType_IsValid(static_cast<int>(dtype)) &&
           tensorflow::DataTypeCanUseMemcpy(static_cast<tensorflow::DataType>(dtype));
  }
  bool ShapeMatches(uint32_t dtype, const int64_t* dims, uint32_t ndims, uint64_t nbytes) const override;
  mutable tensorflow::TensorShape shape;
};

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
  void Start();

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
  void OnReadable() override;

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
  void Send(const std::shared_ptr<PendingRecv>& p, int64_t step_id, const std::string& key);

  // Drops the pending receive `id` (aborted); true if it was still pending.
  bool Forget(uint64_t id) {
    MutexLock l(mu_);
    return pending_.erase(id) > 0;
  }

  // Tells the producer that receive `id` was given up (a cancel frame), so it drops the response or
  // stops sending its chunks instead of filling the flow with bytes nobody reads. Best effort: on a
  // broken or closed connection there is nobody to tell.
  void SendCancel(uint64_t id);

 private:
  // Writes the frames in `iov` without blocking, behind any bytes still unsent: one sendmsg when
  // nothing waits, and what the socket does not take is kept in unsent_ for the loop, which is told
  // to write it (Flush) when unsent_ stops being empty. False with `*error` on a socket error or a
  // closed descriptor (the caller fails the flow). Frames stay whole and in order: every writer
  // appends behind unsent_ under write_mu_.
  bool WriteLocked(iovec* iov, int iovcnt, std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // Loop thread: writes what unsent_ holds as far as the socket takes it, and watches the socket for
  // room while some is left (level-triggered: OnWritable comes back with every wait that finds
  // room). A socket error fails the flow (its EOF then ends it on the loop).
  void Flush() TF_LOCKS_EXCLUDED(write_mu_, mu_);

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

  std::shared_ptr<PendingRecv> Find(uint64_t id);

  std::shared_ptr<PendingRecv> Take(uint64_t id);

  // Closes the connection and fails every pending receive with a message naming the flow, and
  // `taken` too: the receive whose response was being read when the flow broke (its head had
  // already removed it from pending_, so without this it would wait forever). Any thread, once per
  // flow for the pending ones: the shutdown makes the socket readable at EOF, and the loop then
  // ends the flow (End: the receive in progress failed, the descriptor closed).
  // `code`: Unavailable for a lost flow (TF's ClusterCoordinator then treats the peer as failed
  // and may retry); a permanent refusal keeps the code the producer sent (see kRefusalId).
  void Fail(const std::string& what, std::shared_ptr<PendingRecv> taken = nullptr,
            absl::StatusCode code = absl::StatusCode::kUnavailable) TF_LOCKS_EXCLUDED(mu_);

  // Loop thread: the flow's reading ends (EOF, a socket error, a malformed frame, a refusal, the
  // loop stopping). Every pending receive fails, the one in progress too; the loop stops watching
  // the socket before it is closed (its number may be reused at once, by a redial).
  void End(std::string error) TF_LOCKS_EXCLUDED(write_mu_, mu_);

  // Loop thread: every frame the reader's buffer holds, as far as it goes; false with `error` on a
  // malformed frame or a refusal (the flow ends).
  bool ReadFrames(std::string* error);

  using Parse = WireParse;

  // The body in progress goes straight from the socket into its destination (nothing buffered, a
  // rest worth a recv() of its own).
  bool ReadsDirect() const {
    return !ended_ && state_ == State::kBody && body_.dest != nullptr && reader_.buffered() == 0 &&
           body_.left >= FrameReader::kDirectBytes;
  }

  // Loop thread: the head of the next frame, checked field by field as the reader thread checked
  // it (same limits, same error texts). A whole head is consumed and sets what follows: a body, a
  // small proto, an error frame's rest, or nothing (a chunked response's head).
  Parse ParseHead(std::string* error);

  // A whole response's head was read: its receive leaves pending_ (so a broken flow fails it
  // through taken_), and its round trip is counted.
  std::shared_ptr<PendingRecv> StartFrame(uint64_t id, bool is_dead, uint64_t header_bytes, uint64_t payload);

  void StartBody(const Body& body) {
    body_ = body;
    state_ = State::kBody;
  }

  // The last byte of the body in progress is in: the frame completes (a chunk may complete its
  // response; a proto that does not decode fails only its receive).
  void FinishBody();

  // A TensorProto's bytes are all there (in the reader's buffer or large_).
  void CompleteProto(const char* bytes);

  // The frame in hand is whole: counted, and its receive (if any still waits) finished, here on the
  // loop thread (RecvDone: server.cc's completion, which hands the tensor to TF, or starts its
  // asynchronous copy to the device).
  void Complete();

  // Loop thread: an error frame's rest (u32 code, u32 length, the message, then the payload section
  // unless it is a refusal), moved out of the reader's buffer into error_ only as far as the fields
  // read so far say it reaches, so nothing of the next frame is taken. Checked as the reader thread
  // checked it.
  Parse GatherError(std::string* error);

  // Parses error_; kNeedMore with `*need` (the bytes error_ must hold at least) until it is whole.
  Parse ParseError(size_t* need, std::string* error);

  // The head of a chunked response: allocates the tensor; its bytes come in chunk frames, each read
  // straight into the buffer at its offset (zero copy, as for a whole response).
  bool StartChunked(uint64_t id, const std::shared_ptr<PendingRecv>& p, tensorflow::DataType dt,
                    const tensorflow::TensorShape& shape, uint64_t nbytes, bool is_dead, uint64_t header_bytes,
                    std::string* error);

  // A chunk frame's head (ParseProducerHead checked its length): its bytes go straight into the
  // tensor at their offset. A chunk of a receive that is unknown here (aborted, or failed to
  // allocate) is read and dropped; one out of sequence breaks the flow (TCP keeps a connection's
  // bytes in order, so that is a broken peer).
  Parse StartChunk(const ProducerHead& h, std::string* error);

  void CompleteChunked(const std::shared_ptr<PendingRecv>& p);

  const int fd_;
  const std::string peer_;
  const int cls_;
  std::shared_ptr<FlowCounters> counters_;
  EventLoop* const loop_;  // the transport's; reads this connection from Start to End
  // The loop thread's own (its reads and the frame in progress): no lock.
  FrameReader reader_{fd_};
  TfTensorCheck check_;  // ParseHead's: its shape is the one the tensor is allocated with
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

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_CONSUMER_CONN_H_
