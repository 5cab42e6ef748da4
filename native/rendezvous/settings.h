// The data plane's settings: the tunables that are constants (limits, timeouts, batch sizes), the
// process-wide settings that Python and the environment change (class marks, order, chunk size,
// sender options: transport.h declares their setters), and their parsing from the environment
// when a server starts (README.md, "Settings"). Internal to the transport's files.
#ifndef GERYON_NATIVE_RENDEZVOUS_SETTINGS_H_
#define GERYON_NATIVE_RENDEZVOUS_SETTINGS_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "classes.h"  // kMaxClasses
#include "transport.h"

namespace geryon {

// Cancelled ids whose response was not queued yet (still being produced), kept so that it is dropped
// when it comes; bounded (oldest first), since a cancel may also come after its response went out.
inline constexpr size_t kMaxCancelled = 1024;
// Data-port candidates per task: the first that is free when the task starts is its data port.
inline constexpr int kDataPortCandidates = 8;
// How long a consumer waits for a producer's answer to its hello before it tries the next candidate.
inline constexpr int kHelloAckTimeoutSeconds = 5;
// Accepted connections alive at once in this process (a descriptor and a reader's buffer each; the
// event loop reads and writes them all); more are refused, so a flood of connections cannot exhaust
// the process's descriptors. The limit is sized from the cluster
// (connection_limits.h: SizeAcceptedConnections, when a transport starts or learns tasks).
extern std::atomic<int> g_accepted;
// A connection must send its hello within this time from its accept, else it is closed (its slot of
// the connection limit is freed).
inline constexpr int kHelloTimeoutSeconds = 10;
// Responses up to this size are written by the thread that produced them when the socket is idle.
inline constexpr int64_t kInlineResponseBytes = 64 * 1024;
// A write pass of the event loop (ServerConn::WritePass) makes at most this many sendmsg calls for
// one connection, then goes back to epoll_wait: a 100 MB response (in arrival order one frame)
// takes turns with the other connections' reads and writes. On loopback one call moves up to the
// socket's send buffer (megabytes), so the extra epoll_wait per pass costs little.
inline constexpr int kPassSends = 4;
// A producer's write pass sends up to kMaxBatchFrames queued responses of at most kBatchFrameBytes
// each with one sendmsg (WriteBatch): one sendmsg per 4 KiB response was a third of the PS's CPU time
// in the 200 x 4 KiB step (perf, issue 16). IOV_MAX (1024) bounds the iovecs: two per frame.
inline constexpr size_t kMaxBatchFrames = 64;
inline constexpr size_t kBatchFrameBytes = 64 * 1024;
// Lazy connect, on a thread of the transport (receives meanwhile wait on the flow): bounded retries
// with exponential backoff (about 3 s in all for a refused port), then Unavailable; a silent host
// or a producer that does not answer its hello is given kConnectDeadline in all.
inline constexpr int kConnectAttempts = 8;
inline constexpr int kFirstBackoffMs = 25;
inline constexpr auto kConnectDeadline = std::chrono::seconds(10);
// How often a connect in progress checks that the transport is stopping.
inline constexpr auto kDialPoll = std::chrono::milliseconds(100);
// A connect that failed this recently fails the next request at once instead of retrying again.
inline constexpr auto kFailFastWindow = std::chrono::milliseconds(1000);

// Process-wide settings (defined in settings.cc; read with relaxed loads on every use).
extern std::atomic<int> g_dscp[kMaxClasses];
// SO_PRIORITY per class. Without the host agent the qdisc is usually pfifo_fast (or the default
// `prio`), which picks its band from the priority with prio2band = {1, 2, 2, 2, 1, 2, 0, 0, 1, ...}
// (net/sched/sch_generic.c): only 6 (TC_PRIO_INTERACTIVE) and 7 (TC_PRIO_CONTROL) reach band 0, 0
// (unmarked traffic, TC_PRIO_BESTEFFORT) is band 1, and 1, 2, 3, 5 all land in band 2, below
// unmarked traffic. So: class 0 -> 6 (band 0, ahead of everything but control), class 1 -> 0 (band 1,
// with unmarked traffic such as TF's own gRPC), classes 2-7 -> 2 (TC_PRIO_BULK, band 2). 7 stays
// free for the kernel's own control traffic. With the agent, set_class_marks replaces these with the
// priorities its DCB config maps to traffic classes.
extern std::atomic<int> g_priority[kMaxClasses];
extern std::atomic<ResponseOrder> g_order;
extern std::atomic<int64_t> g_chunk_bytes;
// Sender settings (transport.h, "Sender settings"): host order, the burst hold, the inline write,
// and the unsent-bytes bound of producer sockets.
extern std::atomic<SenderOrder> g_sender_order;
extern std::atomic<bool> g_hold;
extern std::atomic<InlineWrite> g_inline;
extern std::atomic<bool> g_chunk_scale;  // sender option chunk_scale: link (true) | off
extern std::atomic<int64_t> g_notsent_lowat;
extern std::atomic<int64_t> g_hold_gap_ns;

// GERYON_ORDER, GERYON_CHUNK_BYTES, the sender settings' variables and GERYON_FALLBACK_WARN, read
// when a server starts (NewTcpTransport); a bad value fails the start with a message naming the
// variable, and changes nothing.
absl::Status OrderSettingsFromEnv();

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_SETTINGS_H_
