// No silent fallback (issue 36): see fallback.h and README.md, "No silent fallback".
#include "fallback.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "classes.h"
#include "flow_counters.h"
#include "transport.h"
#include "tsan.h"
#include "tsl/platform/logging.h"
#include "tsl/platform/thread_annotations.h"

namespace geryon {
namespace {

std::atomic<FallbackMode> g_mode{FallbackMode::kOn};

// Decimal units, as the line reads them ("48.3 MB").
std::string Bytes(uint64_t n) {
  if (n < 1000) return absl::StrCat(n, " B");
  if (n < 1000 * 1000) return absl::StrFormat("%.1f kB", n / 1e3);
  if (n < 1000ull * 1000 * 1000) return absl::StrFormat("%.1f MB", n / 1e6);
  return absl::StrFormat("%.2f GB", n / 1e9);
}


int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr size_t kReportEdges = 1024;  // edge names the process-wide tally keeps (the rest: "other")
// After a warning, the same condition is logged again only under a newer map_table and this long
// after: a job whose threshold search installs a version per step must not log per step.
constexpr int64_t kRepeatNs = 600'000'000'000;  // 10 minutes

constexpr const char* kWhereToRead =
    "See native/rendezvous/GRAPH_PASS.md and the troubleshooting section of native/rendezvous/README.md "
    "(GERYON_FALLBACK_WARN=off silences this line).";

enum Condition { kNoTable = 0, kUntraced = 1, kConditions = 2 };

// The process's watch: one window for all its producer flows (the line is about the task, not a
// flow), the cumulative tally the report reads, and what was logged.
class FallbackWatch {
 public:
  // Returns the lines to log (at most one per condition), for the caller to log outside mu_.
  std::vector<std::string> Note(absl::string_view local_task, absl::string_view edge, uint64_t bytes,
                                bool counts) {
    int64_t version;
    int default_class;
    {
      MapTablePin table;
      version = table->version;
      default_class = table->default_class;
    }
    const FallbackMode mode = g_mode.load(std::memory_order_relaxed);
    std::vector<std::string> lines;
    MutexLock l(mu_);
    all_.Add(edge, bytes);
    if (mode == FallbackMode::kOff) return lines;
    if (!counts) {
      window_.AddLeftOut(bytes);
      return lines;
    }
    FallbackWindow::Verdict v;
    const int64_t now = NowNs();
    if (!window_.Add(now, edge, bytes, version == 0, ProducerBytesSent, &v)) return lines;
    const std::string share =
        absl::StrFormat("%.1f%% of %s that %s sent in the last %.1f s",
                        100.0 * std::min(v.total_bytes, v.unresolved_bytes + v.left_out_bytes) /
                            std::max<uint64_t>(1, v.total_bytes),
                        Bytes(v.total_bytes), local_task, v.seconds);
    if (mode == FallbackMode::kVerbose) {
      lines.push_back(absl::StrCat("Geryon fallback window: ", share, " carried no parameter id (",
                                   v.unresolved_messages, " responses judged, ", Bytes(v.unresolved_bytes), "; ",
                                   Bytes(v.no_table_bytes), " with no map_table installed; ", Bytes(v.left_out_bytes),
                                   " of scalars and eager copies left out)"));
    }
    std::string edges;
    for (const auto& [name, count] : v.top) {
      absl::StrAppend(&edges, edges.empty() ? "" : ", ", name, " (", Bytes(count.first), ")");
    }
    const bool found[kConditions] = {v.no_table, v.untraced};
    for (int c = 0; c < kConditions; ++c) {
      if (!found[c] || !Due(c, version, now)) continue;
      warnings_[c] += 1;
      warned_version_[c] = version;
      last_warn_ns_[c] = now;
      last_share_ = std::min(1.0, static_cast<double>(v.unresolved_bytes + v.left_out_bytes) /
                                      std::max<uint64_t>(1, v.total_bytes));
      last_cause_ = c == kNoTable ? "no_map_table" : "unresolved_share";
      last_line_ = absl::StrCat(
          "Geryon: ", share, " rode the default class (class ", default_class,
          ") because their edges carry no parameter id. Likely cause: ",
          c == kNoTable ? "the protocol is grpc+geryon but no map_table is installed: use geryon.tf.strategy() or adopt()"
                        : "the graph pass could not trace these tensors to a parameter: functions traced before "
                          "adopt(), or control flow the pass does not follow",
          ". Top unresolved edges: ", edges.empty() ? "(none)" : edges, ". ", kWhereToRead);
      lines.push_back(last_line_);
    }
    return lines;
  }

  std::string Json() {
    std::string out;
    MutexLock l(mu_);
    absl::StrAppend(&out, "{\"warnings\":", warnings_[kNoTable] + warnings_[kUntraced],
                    ",\"warnings_no_map_table\":", warnings_[kNoTable],
                    ",\"warnings_unresolved_share\":", warnings_[kUntraced], ",\"last_cause\":", JsonString(last_cause_),
                    ",\"last_share\":", absl::StrFormat("%.6f", last_share_), ",\"last_warning\":", JsonString(last_line_),
                    ",\"edges\":[");
    bool first = true;
    for (const auto& [name, count] : all_.Top(all_.size())) {
      absl::StrAppend(&out, first ? "" : ",", "{\"edge\":", JsonString(name), ",\"bytes\":", count.first,
                      ",\"messages\":", count.second, "}");
      first = false;
    }
    absl::StrAppend(&out, "],\"other_edges_bytes\":", all_.other_bytes(),
                    ",\"other_edges_messages\":", all_.other_messages(), "}");
    return out;
  }

 private:
  bool Due(int c, int64_t version, int64_t now) const TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (warnings_[c] == 0) return true;
    return version != warned_version_[c] && now - last_warn_ns_[c] >= kRepeatNs;
  }

  Mutex mu_;
  EdgeTally all_ TF_GUARDED_BY(mu_){kReportEdges};
  FallbackWindow window_ TF_GUARDED_BY(mu_);
  int64_t warnings_[kConditions] TF_GUARDED_BY(mu_) = {0, 0};
  int64_t warned_version_[kConditions] TF_GUARDED_BY(mu_) = {0, 0};
  int64_t last_warn_ns_[kConditions] TF_GUARDED_BY(mu_) = {0, 0};
  double last_share_ TF_GUARDED_BY(mu_) = 0;
  std::string last_cause_ TF_GUARDED_BY(mu_), last_line_ TF_GUARDED_BY(mu_);
};

FallbackWatch& Watch() {
  static FallbackWatch* const watch = new FallbackWatch();  // for the process, as the flow counters
  return *watch;
}

}  // namespace

bool ParseFallbackMode(absl::string_view value, FallbackMode* mode, std::string* error) {
  if (value == "on") {
    *mode = FallbackMode::kOn;
  } else if (value == "off") {
    *mode = FallbackMode::kOff;
  } else if (value == "verbose") {
    *mode = FallbackMode::kVerbose;
  } else {
    *error = absl::StrCat("GERYON_FALLBACK_WARN='", value, "' is not one of 'on', 'off', 'verbose'");
    return false;
  }
  return true;
}

void SetFallbackMode(FallbackMode mode) { g_mode.store(mode, std::memory_order_relaxed); }

void EdgeTally::Add(absl::string_view edge, uint64_t bytes) {
  auto it = by_edge_.find(edge);
  if (it == by_edge_.end()) {
    if (by_edge_.size() >= capacity_) {
      other_bytes_ += bytes;
      other_messages_ += 1;
      return;
    }
    it = by_edge_.emplace(std::string(edge), std::make_pair(uint64_t{0}, uint64_t{0})).first;
  }
  it->second.first += bytes;
  it->second.second += 1;
}

void EdgeTally::Clear() {
  by_edge_.clear();
  other_bytes_ = other_messages_ = 0;
}

std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> EdgeTally::Top(size_t n) const {
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> all(by_edge_.begin(), by_edge_.end());
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second.first != b.second.first ? a.second.first > b.second.first : a.first < b.first;
  });
  if (all.size() > n) all.resize(n);
  return all;
}

bool FallbackWindow::Add(int64_t now_ns, absl::string_view edge, uint64_t bytes, bool no_table,
                         const std::function<uint64_t()>& total_sent, Verdict* out) {
  if (!open_) {
    open_ = true;
    start_ns_ = now_ns;
    const uint64_t total = total_sent();
    start_total_ = total >= bytes ? total - bytes : 0;  // this response is the window's first
  }
  unresolved_ += bytes;
  messages_ += 1;
  if (no_table) no_table_ += bytes;
  edges_.Add(edge, bytes);
  const int64_t age = now_ns - start_ns_;
  if (age < kMinWindowNs) return false;
  const bool enough = unresolved_ >= kMinUnresolvedBytes && messages_ >= kMinUnresolvedMessages;
  if (!enough && age < kMaxWindowNs) return false;
  const uint64_t total = total_sent();
  bool closed = false;
  if (enough) {
    out->seconds = age / 1e9;
    // The counters are read apart from this tally (another flow may have counted a response it has
    // not noted yet), so the total is never taken below what the window itself holds.
    out->total_bytes = std::max(total - std::min(total, start_total_), unresolved_);
    out->unresolved_bytes = unresolved_;
    out->no_table_bytes = no_table_;
    out->unresolved_messages = messages_;
    out->left_out_bytes = left_out_;
    const double limit = kMaxShare * static_cast<double>(out->total_bytes);
    out->no_table = static_cast<double>(no_table_) > limit;
    out->untraced = static_cast<double>(unresolved_ - no_table_) > limit;
    out->top = edges_.Top(3);
    closed = true;
  }
  // The next window starts here, with the next unresolved response.
  open_ = false;
  unresolved_ = no_table_ = messages_ = left_out_ = 0;
  edges_.Clear();
  return closed;
}

bool CountsForFallback(absl::string_view edge, uint64_t payload_bytes) {
  if (payload_bytes <= kScalarBytes) return false;
  // An eager copy's edge: digits, '_', digits (EagerCopyToDevice's wire id).
  const size_t at = edge.find('_');
  if (at == absl::string_view::npos || at == 0 || at + 1 == edge.size()) return true;
  for (size_t i = 0; i < edge.size(); ++i) {
    if (i != at && !absl::ascii_isdigit(static_cast<unsigned char>(edge[i]))) return true;
  }
  return false;
}

void NoteUnresolvedSent(absl::string_view local_task, absl::string_view edge, uint64_t wire_bytes,
                        uint64_t payload_bytes) {
  const bool counts = CountsForFallback(edge, payload_bytes);
  for (const std::string& line : Watch().Note(local_task, edge, wire_bytes, counts)) LOG(WARNING) << line;
}

std::string ClassificationReportJson() {
  int64_t version;
  int default_class;
  {
    MapTablePin table;
    version = table->version;
    default_class = table->default_class;
  }
  std::string out = absl::StrCat("{\"map_table_version\":", version, ",\"default_class\":", default_class,
                                 ",\"classes\":[");
  bool first = true;
  for (const ClassSent& c : ProducerSentByClass()) {
    absl::StrAppend(&out, first ? "" : ",", "{\"class\":", c.cls, ",\"bytes\":", c.bytes, ",\"messages\":", c.messages,
                    ",\"unresolved_bytes\":", c.unresolved_bytes, ",\"unresolved_messages\":", c.unresolved_messages,
                    "}");
    first = false;
  }
  absl::StrAppend(&out, "],\"fallback\":", Watch().Json(), "}");
  return out;
}

}  // namespace geryon
