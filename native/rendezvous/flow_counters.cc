// Per-flow counters and the arrival log (flow_counters.h), and their JSON and per-class sums.
#include "flow_counters.h"

#include <algorithm>
#include <map>
#include <vector>

#include "classes.h"
#include "tsan.h"

namespace geryon {

namespace {

Mutex g_counters_mu;
std::map<std::string, std::shared_ptr<FlowCounters>>* g_counters TF_PT_GUARDED_BY(g_counters_mu) =
    new std::map<std::string, std::shared_ptr<FlowCounters>>;

Mutex g_arrivals_mu;
std::vector<ArrivalRecord>* g_arrivals TF_PT_GUARDED_BY(g_arrivals_mu) = new std::vector<ArrivalRecord>;
int64_t g_arrivals_capacity TF_GUARDED_BY(g_arrivals_mu) = 0;
std::atomic<bool> g_arrivals_on{false};

}  // namespace

std::shared_ptr<FlowCounters> CountersFor(const std::string& role, const std::string& local,
                                          const std::string& peer, int cls) {
  std::string key = absl::StrCat(role, "|", local, "|", peer, "|", cls);
  MutexLock l(g_counters_mu);
  auto& slot = (*g_counters)[key];
  if (!slot) {
    slot = std::make_shared<FlowCounters>();
    slot->role = role;
    slot->local_task = local;
    slot->peer_task = peer;
    slot->cls = cls;
  }
  return slot;
}

void LogArrival(const ArrivalRecord& a) {
  if (!g_arrivals_on.load(std::memory_order_relaxed)) return;
  MutexLock l(g_arrivals_mu);
  if (static_cast<int64_t>(g_arrivals->size()) < g_arrivals_capacity) g_arrivals->push_back(a);
}

std::vector<ArrivalRecord> TakeArrivals(int64_t capacity) {
  MutexLock l(g_arrivals_mu);
  std::vector<ArrivalRecord> out;
  out.swap(*g_arrivals);
  g_arrivals_capacity = std::max<int64_t>(0, capacity);
  g_arrivals->reserve(static_cast<size_t>(std::min<int64_t>(g_arrivals_capacity, 1 << 16)));
  g_arrivals_on = g_arrivals_capacity > 0;
  return out;
}

std::vector<ClassSent> ProducerSentByClass() {
  std::vector<ClassSent> by_class;
  for (int cls = 0; cls < kMaxClasses; ++cls) by_class.push_back(ClassSent{cls, 0, 0, 0, 0});
  {
    MutexLock l(g_counters_mu);
    for (auto& [key, c] : *g_counters) {
      if (c->role != "producer" || c->cls < 0 || c->cls >= kMaxClasses) continue;
      ClassSent& s = by_class[c->cls];
      s.bytes += c->bytes_sent.load(std::memory_order_relaxed);
      s.messages += c->messages_sent.load(std::memory_order_relaxed);
      s.unresolved_bytes += c->unresolved_bytes.load(std::memory_order_relaxed);
      s.unresolved_messages += c->unresolved_messages.load(std::memory_order_relaxed);
    }
  }
  std::vector<ClassSent> out;
  for (const ClassSent& s : by_class) {
    if (s.bytes > 0 || s.messages > 0) out.push_back(s);
  }
  return out;
}

uint64_t ProducerBytesSent() {
  uint64_t total = 0;
  MutexLock l(g_counters_mu);
  for (auto& [key, c] : *g_counters) {
    if (c->role == "producer") total += c->bytes_sent.load(std::memory_order_relaxed);
  }
  return total;
}

std::string FlowCountersJson() {
  std::vector<std::shared_ptr<FlowCounters>> all;
  {
    MutexLock l(g_counters_mu);
    for (auto& [key, c] : *g_counters) all.push_back(c);
  }
  std::string out = "[";
  for (size_t i = 0; i < all.size(); ++i) {
    const FlowCounters& c = *all[i];
    if (i > 0) out += ",";
    absl::StrAppend(&out, "{\"role\":", JsonString(c.role), ",\"local_task\":", JsonString(c.local_task),
                    ",\"peer_task\":", JsonString(c.peer_task), ",\"class\":", c.cls, ",\"dscp\":", c.dscp.load(),
                    ",\"local_port\":", c.local_port.load(), ",\"peer_port\":", c.peer_port.load(),
                    ",\"bytes_sent\":", c.bytes_sent.load(), ",\"bytes_received\":", c.bytes_received.load(),
                    ",\"messages_sent\":", c.messages_sent.load(),
                    ",\"messages_received\":", c.messages_received.load(), ",\"queue_ns\":", c.queue_ns.load(),
                    ",\"connections\":", c.connections.load(), ",\"errors\":", c.errors.load(),
                    ",\"aborted\":", c.aborted.load(), ",\"unresolved_bytes\":", c.unresolved_bytes.load(),
                    ",\"unresolved_messages\":", c.unresolved_messages.load(), ",\"order_ns\":", c.order_ns.load(),
                    ",\"chunks_sent\":", c.chunks_sent.load(), ",\"preemptions\":", c.preemptions.load(),
                    ",\"host_waits\":", c.host_waits.load(), ",\"host_wait_ns\":", c.host_wait_ns.load(),
                    ",\"cancels_sent\":", c.cancels_sent.load(), ",\"cancelled\":", c.cancelled.load(),
                    ",\"steps_aborted\":", c.steps_aborted.load(),
                    ",\"requests_combined\":", c.requests_combined.load(), ",\"gap_waits\":", c.gap_waits.load(),
                    ",\"gap_skips\":", c.gap_skips.load(), ",\"chunk_bytes_last\":", c.chunk_bytes_last.load(),
                    ",\"drain_bytes_per_s\":", c.drain_bytes_per_s.load(), "}");
  }
  return out + "]";
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace geryon
