// The producer side of a flow: an accepted connection (ServerConn), the responses it queues and
// writes (Response), and the transport's list of serving connections by task (ServingConns).
// Methods: producer_conn.cc (hello, reads, cancels, the burst hold, closing) and producer_write.cc
// (queueing, the write pass, batches, encoding, framing, chunk sizes).
#ifndef GERYON_NATIVE_RENDEZVOUS_PRODUCER_CONN_H_
#define GERYON_NATIVE_RENDEZVOUS_PRODUCER_CONN_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tensorflow/core/framework/tensor.h"
#include "burst_hold.h"
#include "event_loop.h"
#include "flow_counters.h"
#include "frame_reader.h"
#include "send_order.h"
#include "settings.h"
#include "thread_set.h"
#include "transport.h"
#include "tsan.h"
#include "wire_format.h"

namespace geryon {

using tensorflow::Tensor;

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
  void OnReadable() override;

  // Loop thread: the hello's deadline (no hello within kHelloTimeoutSeconds: the words the blocking
  // read's SO_RCVTIMEO gave), or, serving, whichever of its two deadlines is due (the loop keeps
  // one per handler, set to the earlier: ArmTimer): the end of a burst hold's gap wait
  // (HoldAfterServe), host order's re-check of a yielding write pass (WritePass).
  void OnTimer() override;

  // Loop thread: the socket has room again (or failed) while a write pass waited for it.
  void OnWritable() override { WritePass(); }

  // Loop thread, the loop stopping (the transport is destroyed): queued responses dropped (Close),
  // the descriptor closed.
  void OnStop() override;

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
               bool is_dead);

 private:
  // Under mu_: into the queue at its (rank, seq) (SendQueue; order_ns counts the time, host
  // order's included).
  void Insert(std::unique_ptr<Response> r) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Whether the next frame of `r` leaves it unfinished (a chunked response with more than one
  // chunk to go): sending it during a burst hold completes nothing out of order.
  static bool NextFrameIsNotLast(const Response& r);

  // Under mu_: what a write pass may send next: a frame half on the wire, else the most urgent
  // queued response, but during a burst hold only one whose next frame does not finish it
  // (SendQueue::Candidate). nullptr: nothing may go now.
  Response* CandidateLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.Candidate(holding_, [](const Response& r) { return NextFrameIsNotLast(r); });
  }

  // Under mu_: the frame in progress, else the candidate (CandidateLocked; nullptr: none). The
  // caller writes it and then calls PutBackLocked.
  std::unique_ptr<Response> Pick() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Under mu_: `r` (picked) was written as far as it goes now: done, or back to the queue (a frame
  // half on the wire: next, as the partial frame).
  void PutBackLocked(std::unique_ptr<Response> r) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Under mu_: tells the class's host order this connection's most urgent pending rank.
  void PublishLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Under mu_: host order is in force and another connection of the class has a more urgent
  // response pending than `rank`: this connection must not start one of `rank` now.
  bool YieldsLocked(int64_t rank) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return CurrentSenderOrder() == SenderOrder::kHost && HostOrder::ForClass(cls_).MoreUrgentElsewhere(this, rank);
  }

  // inline=drain, with the write lock (released on return): writes pending responses one frame at a
  // time, most urgent first, without blocking; leaves the rest to a write pass of the loop.
  void Drain(std::unique_lock<Mutex>* w);

  // Any thread, after letting go of write_mu_ (an inline writer): a write pass for what is still
  // queued, since a pass that ran meanwhile found write_mu_ taken and left it.
  void ScheduleIfPending();

  // Any thread: a write pass runs on the loop soon (WritePass), once however many ask before it
  // starts: where the writer thread was woken (a condition variable until issue 16), one closure
  // is posted, not one per response. From the loop thread itself the post costs no wake-up (EventLoop::Post).
  void ScheduleWrite();

  // The frame bytes of `r` if it is a small response not started yet that goes out whole in one
  // frame (an error, a dead tensor, or a raw tensor of at most kBatchFrameBytes that is never
  // chunked), else 0: what WriteBatch may put behind another response in one sendmsg. An error is
  // sized from its encoded frame: since protocol 5 it carries the Status's payloads too (up to
  // kMaxErrorPayloads x kMaxPayloadValueBytes), which head + message alone would not count. Encoding
  // an error here is safe: its frame depends on the Status only, not on the order or chunk size in
  // force when it is written, and a queued response is touched only under mu_.
  static size_t SmallWholeBytes(Response* r);

  // Counts `r`, whose last frame just went out (WriteFrom or WriteBatch): one message, and for an
  // unresolved edge (Response::unresolved) its bytes on the wire, every frame's head included. One
  // place for both writers, so the producer's counters cannot drift from the consumer's.
  void FinishResponse(const Response& r);

  // Whether `r` has frames left after the one just written (a chunked response).
  static bool FrameLeft(const Response& r) { return r.payload_done < r.payload().size(); }

  // Under mu_, after Pick() put a small response into batch_: more queued small responses, in queue
  // order (most urgent first), up to kMaxBatchFrames and ChunkBytes() bytes in all, so a more urgent
  // response that comes meanwhile waits no longer behind a batch than behind one chunk. Not during
  // a burst hold (then only frames that finish nothing may go, CandidateLocked), and under host order
  // not past a rank that another connection of the class is more urgent than.
  void PickBatchLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_, write_mu_);

  // With the write lock: the next frame of every response in batch_ (each a whole small response,
  // see PickBatchLocked) in one non-blocking sendmsg of their heads and the tensors' own buffers
  // (no copy; a few more while the socket takes part and `*sends_left` allows). The kernel sends
  // them as a few large segments, so the consumer also reads them with fewer recv() calls and is
  // woken fewer times. kDone: all of them went out. kWouldBlock (the socket is full) or kPaused (the
  // pass's sends are used up): the frames that went out are done, one that went out in part keeps
  // in_frame with its frame_sent (the caller makes it the partial frame), the rest are as before (in_frame
  // false: back to the queue, unchanged). kFailed with `*error` if the socket failed.
  WriteResult WriteBatch(int* sends_left, std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // With the write lock: one frame of `r` (the rest of a half-sent one, else the next), without
  // blocking, counting a preemption when another response goes out while a chunked one is half
  // sent. Counters move only when some of it went out (a socket full before its first byte leaves
  // `r` as it was, to be tried again).
  WriteResult WriteOne(Response* r, int* sends_left, std::string* error) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // A send made progress: the socket is not stuck (HostOrder's stall detection, blocked_since_).
  void NoteProgress() {
    if (blocked_since_->load(std::memory_order_relaxed) != 0) blocked_since_->store(0, std::memory_order_relaxed);
  }

  void Close(const std::string& why, bool log_error);

  // Tells the consumer why it is refused (RefusalFrame), so that its receives fail with
  // FailedPrecondition (permanent) instead of looking like a lost flow (Unavailable, which TF's
  // ClusterCoordinator retries forever). Best effort: the socket is new and the frame small.
  void WriteRefusal(const std::string& local_task, const std::string& why);

  // Answers a hello: `u32 kHelloAckMagic, u16 n, n bytes` naming this task.
  void WriteAck(const std::string& local_task);

  using Parse = WireParse;

  // Loop thread: the hello, out of the reader's buffer (kNeedMore until all of it is there; checked
  // as wire_format.h ParseHello says, as the blocking reads did field by field). `*not_me`: the hello is for another task (it probed this port as one of that task's
  // candidates). On kDone the frame is consumed and hello_task_ / hello_cls_ hold what it said.
  Parse ParseHello(std::string* error, bool* refused, bool* not_me);

  // Loop thread, after ParseHello: the task must be of the cluster spec, at the peer's address. Its
  // host's addresses were resolved when the task was learned; one that did not resolve then is
  // looked up again, on a thread of the transport, since DNS may block for seconds and the loop
  // reads every connection (the answer comes back through Post: Resolved).
  void CheckHello();

  // Loop thread: the lookup CheckHello started is done. The task is looked up in the view again: it
  // may have been forgotten meanwhile (its session ended), and CloseForgotten does not close a
  // connection that is not serving yet.
  void Resolved(const std::string& host, const std::set<std::string>& addresses);

  // Loop thread: only the host the cluster spec names for that task may speak for it. Accepted: the
  // socket is marked, the hello answered, and requests are read (and their responses written by the
  // loop: no thread is started).
  void FinishHello(const std::string& host, const std::set<std::string>& addresses);

  // Loop thread: off the list of serving connections (End, OnStop).
  void Unlist();

  // Loop thread: the hello fails; the consumer is told why where it can act on it (a refusal frame:
  // FailedPrecondition, permanent; an ack naming this task when it looked for another), then closed.
  void FailHello(const std::string& error, bool refused, bool not_me);

  // Loop thread: out of threads for a hello's host lookup (CheckHello): a transient refusal
  // (Unavailable, as at the connection limit: TF retries it), logged, and closed.
  void Refuse(const std::string& why);

  // Loop thread: the connection's reading ends (EOF, an error, a refused hello): closed (queued
  // responses dropped), no longer watched, and the descriptor closed.
  void End(const std::string& why, bool log_error);

  // Loop thread (End, OnStop, once: the loop calls neither after Remove): closes the descriptor,
  // under the write lock, since an inline writer (Enqueue) may hold it; closed_ is set by then, so
  // no writer touches the descriptor afterwards (its number may be reused at once).
  void Release();

  // Loop thread: every whole request and cancel frame in the reader's buffer, in order.
  void ReadFrames();
  // A cancel frame: the consumer gave receive `id` up. Its queued response is dropped, also one half
  // sent in chunks (the queue holds those between frames only); one not produced yet is remembered
  // and dropped when it comes (Enqueue), one being written now stops after its current frame
  // (PutBackLocked). A response sent whole cannot be recalled once its frame started.
  void Cancel(uint64_t id);

  // Loop thread, the connection's reading over (EOF, reset, an error): every step with a request
  // still waiting for its tensor is aborted, once per step (TF's RecvTensor handler does this when
  // its call is cancelled, which gRPC does when the client's connection goes). Requests already
  // answered do not count: a consumer that leaves with nothing outstanding aborts nothing.
  void AbortWaitingSteps(const std::string& why);

  // Loop thread, outside mu_ (the hook logs and hands the abort to a thread of TF's: it does not
  // wait, but no producing thread should wait on mu_ meanwhile).
  void AbortStep(int64_t step_id, const std::string& what);

  // Under mu_: whether `id` was cancelled before its response (or its next chunk) was queued; if so
  // it is forgotten and counted.
  bool TakeCancelledLocked(uint64_t id) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Loop thread. Urgency order: holds the writes while the next request is already readable (see
  // kRequestHeadBytes), so the responses of one burst are ordered together. Ending a hold schedules
  // a write pass (what the hold kept queued; Enqueue schedules none for that).
  void SetHolding(bool hold);

  // What the FrameReader already holds counts too: a burst's requests are often in its buffer
  // already, not in the socket (and then no ioctl is needed).
  bool MoreRequestsReadable();

  // Loop thread, after a request is read and before it is served: the burst hold's decision
  // (burst_hold.h). During a hold a write pass still sends chunks that do not finish their
  // response (CandidateLocked), so the link does not idle behind the hold.
  void HoldBeforeServe();

  // The gap wait, without blocking the loop (it reads every connection): a deadline gap_ns from
  // now, at which OnTimer ends the hold unless a request header is readable by then; the next
  // request read before it (HoldBeforeServe) clears it. Before the event loop the reader thread
  // waited in ppoll for the gap.
  void HoldAfterServe();

  // Loop thread, serving: the loop's one timer for this connection at the earlier of its two
  // deadlines (the gap wait's, host order's re-check), or none. OnTimer sees which are due.
  void ArmTimer();

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
  void WritePass();

  // Loop thread: EPOLLOUT interest on or off (an epoll_ctl only when it changes).
  void WantWrite(bool on);

  // Encodes the head. Chunked (kind 3) when the order is urgency and the raw payload is larger
  // than the chunk size then in force; arrival order sends every response whole, as before issue 14.
  static void Encode(Response* r);

  // Sets up the next frame of `r`: the head (with the whole payload unless chunked; with the first
  // chunk when chunked, so a chunked response's first write is one frame pair), else the next
  // chunk, of at most `chunk` payload bytes.
  static void NextFrame(Response* r, size_t chunk);

  // Sends frames of `r`: all that is left, or (one_frame) the current or next frame only, then
  // kMore if more remain. Non-blocking: stops with kWouldBlock when the socket is full, or kPaused
  // when `*sends_left` sendmsg calls were made (nullptr: no bound); in_frame then says whether a
  // frame is half on the wire.
  WriteResult WriteFrom(Response* r, bool one_frame, int* sends_left, std::string* error)
      TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // The next chunk's payload bytes (sender option chunk_scale, transport.h; ChunkSizer in
  // send_order.h): on loopback (2-3 GB/s) a 100 MB pull took 1.27x [1.21, 1.33] less time than in
  // fixed 256 KiB chunks (bench/README.md, "Chunks sized to the link"). The drain rate counts what
  // left the socket: what it took less what it still holds (SIOCOUTQ: sent and not yet acknowledged).
  size_t FrameChunk(size_t base) TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // Bytes that have left the socket: taken by sendmsg, less those it still queues (SIOCOUTQ).
  uint64_t Left() TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // With the write lock: TCP_NOTSENT_LOWAT as the setting says (checked per write, set on change).
  void ApplyNotsentLowat() TF_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

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
  BurstHold hold_;  // the burst hold's state, the loop thread's own (HoldBeforeServe)
  uint64_t next_seq_ TF_GUARDED_BY(mu_) = 0;
  // The pending responses in send order, a frame half on the wire first (SendQueue).
  SendQueue<Response> queue_ TF_GUARDED_BY(mu_);
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
  // Chunks scaled to the drain rate (FrameChunk): bytes the socket took (Left), the rate's windows.
  uint64_t sent_total_ TF_GUARDED_BY(write_mu_) = 0;
  ChunkSizer chunk_sizer_ TF_GUARDED_BY(write_mu_){kChunkBaseBytesPerNs, kMaxScaledChunkBytes};
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

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_PRODUCER_CONN_H_
