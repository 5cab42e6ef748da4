// No silent fallback (issue 36): a task whose tensors ride the default class because their edges
// carry no parameter id says so, once, in its log, and keeps a tally of those edges for
// geryon.tf.classification_report().
//
// Why here: the producer's unresolved counting (transport.cc, FinishResponse) is exact and runs as
// the tensors go out, so the line comes within a few steps. Only the unresolved path calls in: a
// resolved tensor costs what it did before (its flow's atomic adds), and the process totals the
// share needs are summed from the flow counters when a window closes, not per tensor.
#ifndef GERYON_NATIVE_RENDEZVOUS_FALLBACK_H_
#define GERYON_NATIVE_RENDEZVOUS_FALLBACK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace geryon {

// GERYON_FALLBACK_WARN: "on" (default) logs the line; "off" logs nothing (the tally and the
// report stay); "verbose" also logs every window's numbers (for checking the thresholds on a run).
enum class FallbackMode { kOn, kOff, kVerbose };
// False with `*error` naming the variable and the allowed values for anything else.
bool ParseFallbackMode(absl::string_view value, FallbackMode* mode, std::string* error);
void SetFallbackMode(FallbackMode mode);

// Bytes (and messages) per edge name, at most `capacity` names: the rest is summed into `other_*`,
// so a model with ever-new edge names (re-traced functions) cannot grow it without bound.
class EdgeTally {
 public:
  explicit EdgeTally(size_t capacity) : capacity_(capacity) {}
  void Add(absl::string_view edge, uint64_t bytes);
  void Clear();
  // The `n` names with the most bytes, most first (ties by name).
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> Top(size_t n) const;
  size_t size() const { return by_edge_.size(); }
  uint64_t other_bytes() const { return other_bytes_; }
  uint64_t other_messages() const { return other_messages_; }

 private:
  size_t capacity_;
  absl::flat_hash_map<std::string, std::pair<uint64_t, uint64_t>> by_edge_;  // bytes, messages
  uint64_t other_bytes_ = 0, other_messages_ = 0;
};

// The window logic, pure (no clock, no counters, no log): fed one unresolved response at a time
// with the process's producer bytes so far. A window opens at an unresolved response and closes at
// the first one at least kMinWindowNs later once it holds kMinUnresolvedBytes in
// kMinUnresolvedMessages responses; then its share decides. The floor keeps a task quiet about
// tiny transfers before training (an install's own op, a control edge) that are all it sent in a
// window; parameter-free edges during training (control dummies, the iteration counter) are far
// under 1% of a step's bytes (README, "No silent fallback").
class FallbackWindow {
 public:
  static constexpr int64_t kMinWindowNs = 50'000'000;       // 50 ms: ~2 steps of 20 ms
  static constexpr int64_t kMaxWindowNs = 10'000'000'000;   // under the floor this long: start over
  static constexpr uint64_t kMinUnresolvedBytes = 2048;
  static constexpr uint64_t kMinUnresolvedMessages = 4;
  static constexpr double kMaxShare = 0.01;  // more than 1% of the bytes sent is a warning
  static constexpr size_t kWindowEdges = 64;

  struct Verdict {
    double seconds = 0;
    uint64_t total_bytes = 0;         // sent by this process's producer flows in the window
    uint64_t unresolved_bytes = 0;    // of which unresolved, and counted (CountsForFallback)
    uint64_t left_out_bytes = 0;      // unresolved but left out of the decision (CountsForFallback)
    uint64_t no_table_bytes = 0;      // of which sent while no map_table was installed here
    uint64_t unresolved_messages = 0;
    bool no_table = false;            // condition 1: no map_table and more than 1%
    bool untraced = false;            // condition 2: a map_table, and more than 1% unresolved
    std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> top;  // 3 edges, most bytes
  };

  FallbackWindow() : edges_(kWindowEdges) {}
  // `total_sent` is called when a window opens or closes only: the process's producer bytes so far,
  // this response included. True when the window closed (then `*out` is its verdict).
  bool Add(int64_t now_ns, absl::string_view edge, uint64_t bytes, bool no_table,
           const std::function<uint64_t()>& total_sent, Verdict* out);
  // An unresolved response left out of the decision (CountsForFallback): shown in the line's share
  // of the window it falls in, never opening or closing one.
  void AddLeftOut(uint64_t bytes) {
    if (open_) left_out_ += bytes;
  }

 private:
  bool open_ = false;
  int64_t start_ns_ = 0;
  uint64_t start_total_ = 0;
  uint64_t unresolved_ = 0, no_table_ = 0, messages_ = 0, left_out_ = 0;
  EdgeTally edges_;
};

// Unresolved responses the window leaves out (the tally and the counters keep them): tensors of at
// most kScalarBytes (a control edge's dummy, the iteration counter, a learning rate: no parameter is
// that small, and a frame head would make them a visible share of a small model's step), and eager
// copies between tasks (a coordinator reading a variable or a result: rendezvous keys made by TF's
// eager runtime, edge "<random>_<n>", not a graph's Send/Recv pair, so never the pass's to name).
inline constexpr uint64_t kScalarBytes = 8;
bool CountsForFallback(absl::string_view edge, uint64_t payload_bytes);

// transport.cc, for each unresolved response a producer flow of `local_task` finished sending:
// `wire_bytes` as the flow counters count it, `payload_bytes` the tensor's own.
void NoteUnresolvedSent(absl::string_view local_task, absl::string_view edge, uint64_t wire_bytes,
                        uint64_t payload_bytes);

// This process's classification report as JSON: per class what its producer flows sent (from the
// flow counters), the unresolved edges with their bytes, and the warnings logged.
std::string ClassificationReportJson();

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_FALLBACK_H_
