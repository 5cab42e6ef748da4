// How many data-plane connections a process accepts at once, sized from the cluster (issue 16 item 5).
//
// Every accepted connection is a socket, a connection object and its frame reader's buffer; no
// thread (the transport's one event loop reads and writes every accepted connection, event_loop.h;
// before issue 16, a reader and a writer thread each). The limit used to be a fixed 512: 64 workers
// at 8 classes, 128 at 4, and the 513th flow was refused
// whatever the cluster. It is now sized from the tasks the process's transports know: a peer opens
// at most one connection per class, plus one more for a redial or a port probe that overlaps its
// old connection. It is sized again when a transport learns more tasks (tasks are never
// forgotten), stays at least the old 512, and at most kAcceptedConnectionsCap. The descriptors it
// needs are checked against RLIMIT_NOFILE, whose soft limit is raised toward the hard limit when it
// is too low (logged); when even the hard limit is too low, the limit is what fits (logged). A pids
// cgroup (a pod's pids limit) no longer bounds it: accepting a connection starts no thread. Until
// the producer's writes moved onto the loop, one thread per connection was cut to the cgroup's
// headroom, which refused connections a thread-less connection does not need refused.
#ifndef GERYON_NATIVE_RENDEZVOUS_CONNECTION_LIMITS_H_
#define GERYON_NATIVE_RENDEZVOUS_CONNECTION_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace geryon {

inline constexpr int64_t kMinAcceptedConnections = 512;  // the old fixed limit
// Hard cap: 8192 connections are 8192 descriptors, socket buffers and 64 KiB frame-reader buffers
// (512 MiB of them, reserved only as they fill); 8192 writer threads (16384 threads before the event
// loop took their readers) until the writes moved onto the loop too.
inline constexpr int64_t kAcceptedConnectionsCap = 8192;
// Descriptors left for the rest of the process: TF and gRPC (a PS's gRPC holds a few sockets per
// peer it talks to), files, pipes. This process's own outgoing flows are counted separately.
inline constexpr int64_t kReservedDescriptors = 512;

// The data port's listen backlog: a big cluster's first step opens every flow at once (128 workers x
// 4 classes = 512 connects within milliseconds); with the old 128, SYNs beyond it were dropped and
// retried a second later. The kernel clamps it to net.core.somaxconn (4096 since Linux 5.4).
inline constexpr int kListenBacklog = 4096;

struct AcceptedLimitPlan {
  int64_t limit = kMinAcceptedConnections;  // accepted connections allowed at once
  int64_t wanted = kMinAcceptedConnections;  // what the cluster asks for, before the descriptor bound
  int64_t descriptors = 0;                   // RLIMIT_NOFILE soft limit this needs
};

// The plan for a cluster of `tasks` tasks (this one included) under a hard descriptor limit of
// `nofile_hard` (< 0: no bound). The descriptor bound never cuts below kMinAcceptedConnections (the
// old fixed limit). Pure, for tests.
AcceptedLimitPlan PlanAcceptedConnections(int64_t tasks, int64_t nofile_hard);

// Grows the process's limit for a cluster of `tasks` tasks: raises RLIMIT_NOFILE's soft limit when
// the plan needs more descriptors, logs what it changed. Thread-safe. Sized again only for a larger
// cluster than before (tasks are never forgotten), so the limit never shrinks.
void SizeAcceptedConnections(int64_t tasks);

// The limit in force now (read by the accept loop per connection).
int64_t AcceptedConnectionLimit();

// The operator's fixed limit, from GERYON_MAX_ACCEPTED_CONNECTIONS (read when a server starts),
// replacing the sized one; 0 goes back to sizing. For a host that must bound its connections
// tighter than the cluster asks, or one that needs more than RLIMIT_NOFILE's sizing gives.
inline constexpr absl::string_view kMaxAcceptedEnv = "GERYON_MAX_ACCEPTED_CONNECTIONS";
// Parses the variable's value: an integer in [1, kAcceptedConnectionsCap]. On error returns false
// and sets `*error` to a message naming the variable and the range.
bool ParseAcceptedConnectionOverride(absl::string_view value, int64_t* limit, std::string* error);
void SetAcceptedConnectionOverride(int64_t limit);

// Why the limit is what it is, for the refusal's log line.
std::string AcceptedLimitReason();

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_CONNECTION_LIMITS_H_
