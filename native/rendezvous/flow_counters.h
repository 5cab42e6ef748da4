// Per-flow counters (geryon_flow_counters, README.md "Counters"), the arrival log of benches and
// tests, and how errors and counters name a flow's peer and a request's edge.
#ifndef GERYON_NATIVE_RENDEZVOUS_FLOW_COUNTERS_H_
#define GERYON_NATIVE_RENDEZVOUS_FLOW_COUNTERS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "transport.h"

namespace geryon {

// TF's ClusterCoordinator tells a failed PS from a failed worker by this phrase in the error (see
// _is_ps_failure in cluster_coordinator.py); without it a dead PS looks like a dead worker, and the
// coordinator would wait for that worker to come back instead of failing the step.
inline std::string PeerTag(const std::string& peer_task) {
  return absl::StrCat(" [GRPC error information from remote target ", peer_task, "]");
}

// The edge name of a rendezvous key "<src>;<incarnation>;<dst>;<edge>;<frame:iter>", or "".
inline absl::string_view EdgeOfKey(absl::string_view key) {
  for (int field = 0; field < 3; ++field) {
    size_t at = key.find(';');
    if (at == absl::string_view::npos) return "";
    key.remove_prefix(at + 1);
  }
  return key.substr(0, key.find(';'));
}

struct FlowCounters {
  std::string role;  // "consumer": this task receives tensors on it; "producer": it sends them
  std::string local_task, peer_task;
  int cls = 0;
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};
  std::atomic<uint64_t> messages_sent{0}, messages_received{0};
  std::atomic<uint64_t> queue_ns{0};  // producer: response waited for the socket; consumer: round trip
  std::atomic<uint64_t> connections{0}, errors{0};
  std::atomic<uint64_t> aborted{0};  // consumer: receives ended by StartAbort/cancellation before their tensor
  // Responses whose edge resolves to no parameter (no graph-pass annotation, no TF1 binding): what
  // the pass could not trace, plus tensors that carry no parameter at all. They take the map_table's
  // default class; these counters make a model that defeats the pass visible. Both roles: the
  // consumer decides (its table chose the class) and tells the producer in the request's rank
  // (kUnresolvedRank), so a flow's two ends count the same responses, each the bytes it moved.
  std::atomic<uint64_t> unresolved_bytes{0}, unresolved_messages{0};
  // producer (issue 14): ns spent in the ordered queue's code (insert, pick), chunk frames sent, and
  // preemptions: a chunked response sent in part went back to the queue and another went next.
  std::atomic<uint64_t> order_ns{0}, chunks_sent{0}, preemptions{0};
  // producer: the chunk size in force when the last chunk frame started (chunk_bytes, or more on a
  // connection that drains faster than 10 Gbit/s: sender option chunk_scale; a response's last
  // chunk may carry less), and the last drain rate measured, bytes per second (0: none yet).
  std::atomic<uint64_t> chunk_bytes_last{0}, drain_bytes_per_s{0};
  // producer, host order: times a connection's write passes yielded to a more urgent response of the
  // same class on another connection, and the ns they waited.
  std::atomic<uint64_t> host_waits{0}, host_wait_ns{0};
  // issue 16: consumer: cancel frames sent for aborted receives; producer: responses dropped (queued,
  // or half sent in chunks) because their consumer cancelled them.
  std::atomic<uint64_t> cancels_sent{0}, cancelled{0};
  // producer (issue 16): steps aborted because this flow's consumer went away (or cancelled a
  // request) while a request of that step still waited for its tensor (TF's Worker::AbortStep).
  std::atomic<uint64_t> steps_aborted{0};
  // consumer: requests that went out with another thread's write (one sendmsg for several)
  std::atomic<uint64_t> requests_combined{0};
  // producer, burst hold: gap waits that ran out (the request they waited for did not come: the
  // held responses went up to hold_gap_us late), and gap waits skipped because the burst already
  // had as many requests as the connection's last bursts (BurstHold::CountRequest).
  std::atomic<uint64_t> gap_waits{0}, gap_skips{0};
  std::atomic<int> dscp{-1};
  std::atomic<int> local_port{0}, peer_port{0};
};

// The counters of one flow, made on first use and kept for the process's lifetime (a redialed flow
// goes on counting in the same entry).
std::shared_ptr<FlowCounters> CountersFor(const std::string& role, const std::string& local,
                                          const std::string& peer, int cls);

// Logs one completed receive (TakeArrivals); one relaxed load when logging is off.
void LogArrival(const ArrivalRecord& a);

// `s` as a JSON string: quotes and backslashes escaped, control bytes as spaces (the counters' task
// names and the fallback report's edge names; neither holds control bytes on purpose).
std::string JsonString(absl::string_view s);

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_FLOW_COUNTERS_H_
