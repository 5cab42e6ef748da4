// Geryon data plane: moves rendezvous tensors between tasks on k prioritized flows per task pair.
//
// The Transport interface is what the rendezvous manager (server.cc) needs; TcpTransport is the
// implementation that runs anywhere (one TCP connection per (peer task, class), marked with the
// class's DSCP and socket priority on both ends). An ibverbs backend would implement the same
// interface with k queue pairs per peer (see README.md). Wire protocol: README.md, "Transport protocol".
#ifndef GERYON_NATIVE_RENDEZVOUS_TRANSPORT_H_
#define GERYON_NATIVE_RENDEZVOUS_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/allocator.h"
#include "tensorflow/core/framework/tensor.h"
#include "classes.h"  // kMaxClasses

namespace geryon {

// DSCP and SO_PRIORITY for each class; settable from Python (geryon_set_class_marks).
// Defaults: class 0 EF (46), 1 AF31 (26), 2 AF21 (18), 3 AF11 (10), 4 AF12 (12), 5 AF22 (20),
// 6 AF32 (28), 7 CS1 (8). SO_PRIORITY: class 0 -> 6, class 1 -> 0, classes 2-7 -> 2, so that
// without the agent pfifo_fast puts class 0 in band 0, class 1 in band 1 with unmarked traffic and
// the rest in band 2 (see g_priority in transport.cc). Not DSCP >> 3: Linux derives a priority
// from the TOS byte with ip_tos2prio, and 5, 3, 2, 1 would all land in band 2, below unmarked traffic.
int DscpForClass(int cls);
int PriorityForClass(int cls);
// Returns false (and changes nothing) when a value is out of range.
bool SetClassMarks(const int* dscp, const int* priority, int n);

// A task of the cluster as the data plane sees it.
struct PeerAddress {
  std::string task;  // "/job:ps/replica:0/task:0"
  std::string host;  // from the cluster spec
  int data_port = 0;
  // The host's numeric addresses, resolved when the transport learns the task (not per accept or
  // hello); the accept loop and the hello check compare a peer's address with these.
  std::set<std::string> addresses;
};

// The cluster as the data plane needs it: every task's data address, and which hosts may connect.
struct ClusterView {
  std::string local_task;
  int local_data_port = 0;
  std::map<std::string, PeerAddress> tasks;  // by task name
  // Every task's gRPC port in the cluster spec, whatever its host: a data-port candidate that is one
  // of them is never taken (NewTcpTransport), else a task started first could hold the port TF's own
  // gRPC server of another task is about to bind (TF's tests pick ports with portpicker: two of them
  // 1000 apart put one task's first data-port candidate on another task's gRPC port).
  std::set<int> grpc_ports;
};

// What the producer side gives back for one request.
using ServeDone = std::function<void(const absl::Status&, const tensorflow::Tensor&, bool is_dead)>;
// Producer side: find the tensor `key` of step `step_id` in the local rendezvous.
using ServeFn = std::function<void(int64_t step_id, const std::string& key, ServeDone done)>;
// Producer side: abort step `step_id` on this task (a consumer that had requests of that step still
// waiting for their tensor went away, or cancelled one), as TF's worker does (Worker::AbortStep).
// Called on the event loop's thread: must not block.
using AbortStepFn = std::function<void(int64_t step_id, const std::string& why)>;
// Consumer side: the result of one receive. Called exactly once.
using RecvDone = std::function<void(const absl::Status&, const tensorflow::Tensor&, bool is_dead)>;

// A pending receive; Abort makes its RecvDone run now with `status` (if it has not run yet).
class RecvHandle {
 public:
  virtual ~RecvHandle() = default;
  virtual void Abort(const absl::Status& status) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Starts serving requests from peers with `serve`; `abort_step` (may be empty) is called when a
  // consumer disappears, or cancels a request, while the step's tensor is still being waited for.
  virtual absl::Status Start(ServeFn serve, AbortStepFn abort_step) = 0;
  // Which tasks the data plane knows (dials, and accepts connections from): those of the server's
  // own cluster and of every cluster learned and not yet forgotten. A task named by several takes
  // its address from the one learned last (its flows are redialed when that changes); the local
  // task's own entry never changes.
  //
  // Replaces the server's own cluster (UpdateServerDef); at start it is the view the transport was
  // made with.
  virtual void SetServerCluster(const ClusterView& view) = 0;
  // Learns the tasks of a session's cluster (when TF makes that session's worker cache: e.g. the
  // coordinator that joins as "chief" through the eager context's server-def update) until
  // ForgetCluster is called with the id returned here (when TF destroys that worker cache, i.e. the
  // session ended). A task no other cluster names is forgotten then: refused, and not dialed.
  virtual uint64_t LearnCluster(const ClusterView& view) = 0;
  virtual void ForgetCluster(uint64_t id) = 0;
  // Asks `peer_task` for tensor `key` of `step_id` on the flow of class `cls`; the tensor is
  // allocated with `allocator` and the bytes are read from the socket straight into it.
  virtual std::shared_ptr<RecvHandle> Recv(const std::string& peer_task, int cls, int64_t step_id,
                                           const std::string& key, tensorflow::Allocator* allocator,
                                           RecvDone done) = 0;
};

// TCP backend. The object lives as long as the process (TF servers are never destroyed cleanly).
std::unique_ptr<Transport> NewTcpTransport(const ClusterView& view, absl::Status* status);

// Order inside a class (issue 14): how each producer connection picks its next response.
//   kUrgency: the pending response with the lowest urgency rank (the map_table's consumption
//             order) first, then arrival; responses above the chunk size go out in chunks, and a
//             more urgent response that becomes ready preempts at the next chunk boundary.
//   kArrival: first ready, first sent, each response whole (the data plane before issue 14).
// Per process; GERYON_ORDER sets it at start, SetResponseOrder (op GeryonSetOrder) at run time.
enum class ResponseOrder { kUrgency, kArrival };
ResponseOrder CurrentResponseOrder();
const char* ResponseOrderName(ResponseOrder order);
// Returns false with `*error` naming the field and what is allowed; changes nothing then.
bool SetResponseOrder(absl::string_view order, std::string* error);

// Chunk size of a response sent in urgency order: the preemption granularity. Default 256 KiB,
// GERYON_CHUNK_BYTES at start, SetChunkBytes at run time; allowed kMinChunkBytes..kMaxChunkBytes.
// It is the size on links up to kChunkBaseBytesPerNs (10 Gbit/s); with the sender option
// chunk_scale=link (the default) a connection that drains faster sends chunks that take the same
// time: size x drain rate / 10 Gbit/s, at most max(size, kMaxScaledChunkBytes) (README.md, "Chunks
// sized to the link").
inline constexpr int64_t kDefaultChunkBytes = 256 * 1024;
inline constexpr double kChunkBaseBytesPerNs = 1.25;  // 10 Gbit/s
inline constexpr int64_t kMaxScaledChunkBytes = int64_t{4} << 20;
inline constexpr int64_t kMinChunkBytes = 4 * 1024;
inline constexpr int64_t kMaxChunkBytes = int64_t{1} << 30;
int64_t ChunkBytes();
bool SetChunkBytes(int64_t bytes, std::string* error);

// Sender settings (issue 14), per process; GERYON_SENDER_ORDER, GERYON_HOLD, GERYON_HOLD_GAP_US,
// GERYON_INLINE and GERYON_NOTSENT_LOWAT at start, SetSenderOption (op GeryonSetSenderOption) at
// run time.
//   sender_order  connection: each connection serves its own queue in urgency order (the kernel
//                 interleaves the connections of a class);
//                 host (default): before a writer starts a response or a chunk it yields to a more
//                 urgent pending response of the same class on another connection of this process
//                 (equal ranks go together, unranked last), so one urgency order per process and class.
//   hold          on (default) | off: the burst hold (urgency order only; see README.md, "Bursts").
//   hold_gap_us   the burst hold also waits up to this long for a burst's next request while the
//                 burst is younger than 2 ms (0: only while a request is already readable).
//   inline        arrival (default): as small in arrival order, as off in urgency order;
//                 small: a response up to 64 KiB is written by the thread that produced it
//                 when nothing else is pending; off: every response goes through a write pass of
//                 the event loop; drain: the producing thread writes whatever is pending, most
//                 urgent first, until the socket is full (a write pass finishes the rest).
//   notsent_lowat TCP_NOTSENT_LOWAT of producer sockets in bytes (0: the kernel's default, no bound):
//                 how many unsent bytes a socket may queue, so the kernel's FIFO backlog stays small
//                 against the order.
//   chunk_scale   link (default): chunks grow with a connection's measured drain rate above 10
//                 Gbit/s, so a chunk takes as long as chunk_bytes does at 10 Gbit/s; off: every
//                 chunk is chunk_bytes.
enum class SenderOrder { kConnection, kHost };
enum class InlineWrite { kOff, kSmall, kDrain, kArrival };
inline constexpr int64_t kDefaultNotsentLowat = 0;
inline constexpr int64_t kDefaultHoldGapUs = 300;
inline constexpr int64_t kMaxNotsentLowat = int64_t{1} << 30;
SenderOrder CurrentSenderOrder();
// `name` is one of sender_order, hold, hold_gap_us, inline, notsent_lowat, chunk_scale; false with
// `*error` naming the field and what is allowed, changing nothing.
bool SetSenderOption(absl::string_view name, absl::string_view value, std::string* error);
// The value in force of option `name` ("" for an unknown name).
std::string SenderOption(absl::string_view name);

// The order in which receives completed on this process's consumer flows (for benches and
// tests): Take returns what was logged since the last call and then logs up to `capacity`
// further completions (0: stop logging). Off by default; costs one relaxed load per receive then.
struct ArrivalRecord {
  int64_t t_ns;      // steady clock, when the last byte was in the tensor
  int32_t rank;      // urgency rank the request carried (kUnranked: no parameter)
  int64_t param_id;  // -1: none
  uint64_t bytes;    // payload bytes
  int cls;
};
std::vector<ArrivalRecord> TakeArrivals(int64_t capacity);

// Per-flow counters of every transport in this process, as JSON (a list of objects).
std::string FlowCountersJson();

// What this process's producer flows sent, summed per class (classes that sent nothing left out),
// and in all (fallback.cc: the share of unresolved bytes, geryon.tf.classification_report()).
struct ClassSent {
  int cls;
  uint64_t bytes, messages, unresolved_bytes, unresolved_messages;
};
std::vector<ClassSent> ProducerSentByClass();
uint64_t ProducerBytesSent();

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_TRANSPORT_H_
