// The burst hold (README.md, "Ordering and chunking"): when a producer connection in urgency order
// holds its writes, so that the responses of a burst of requests are ordered together instead of the
// first being sent before the rest are read. Its decisions only, apart from sockets and TensorFlow
// (the C++ unit tests, tests/, drive it with their own clock): ServerConn feeds it every request it
// reads, tells it whether more is readable, and keeps the gap wait's timer on the event loop.
#ifndef GERYON_NATIVE_RENDEZVOUS_BURST_HOLD_H_
#define GERYON_NATIVE_RENDEZVOUS_BURST_HOLD_H_

#include <algorithm>
#include <cstdint>

namespace geryon {

// While at least a request header more is already readable on a connection, the producer holds its
// writes. Bounded, so a stream of requests cannot hold the responses back for long.
inline constexpr int kMaxHeldRequests = 256;
// The gap wait (hold_gap_us) holds a burst at most this long after its first request.
inline constexpr int64_t kBurstWindowNs = 2 * 1000 * 1000;
inline constexpr int64_t kMaxHoldGapUs = 10 * 1000;

class BurstHold {
 public:
  struct Decision {
    bool hold = false;        // hold the writes (until the next request, or the gap wait's end)
    bool gap_skipped = false;  // a gap wait was not needed: the burst is as large as the last ones
  };

  // A request was read and is about to be served. `enabled`: urgency order with the hold on;
  // `gap_ns`: hold_gap_us in ns (0: no gap wait); `more_readable()`: a request header more is
  // readable (called only when enabled and under kMaxHeldRequests, since it may cost an ioctl).
  // Holds while a request header more is readable, or (gap_ns > 0) while the burst is younger than
  // kBurstWindowNs, in which case the caller waits up to the gap for the next request (gap_wait()).
  // A consumer's executor issues a step's receives one by one, and under load they trickle in tens
  // of microseconds apart: whatever the producer wrote before the most urgent request was read
  // completed first (bench_rendezvous --order: the first 1 to 9 completions out of rank order in
  // every step whose tau was below 0.95).
  template <typename More>
  Decision OnRequest(int64_t now, bool enabled, int64_t gap_ns, More more_readable) {
    const bool on = enabled && held_ < kMaxHeldRequests;
    if (held_ == 0) burst_start_ns_ = now;
    const bool more = on && more_readable();
    gap_ns_ = gap_ns;
    const bool complete = CountRequest(now);  // every request counts, held or not
    const bool gap = on && !more && gap_ns_ > 0 && now - burst_start_ns_ < kBurstWindowNs;
    Decision d;
    d.gap_skipped = gap && complete;
    gap_wait_ = gap && !complete;
    d.hold = more || gap_wait_;
    held_ = d.hold ? held_ + 1 : 0;
    return d;
  }

  // The gap wait ran out without a request: the hold ends.
  void End() { held_ = 0; }
  // The last request's decision was a gap wait: wait up to gap_ns() for the next request.
  bool gap_wait() const { return gap_wait_; }
  int64_t gap_ns() const { return gap_ns_; }
  int held() const { return held_; }

 private:
  // Counts a request into its burst (requests less than gap_ns_ apart); true when this burst has as
  // many requests as the larger of the last two had, so no gap wait is needed for this one: a
  // consumer asks a connection for the same receives every step, and without this an isolated
  // request (one tensor per step on a connection) waited the whole gap before its response went
  // (bench_rendezvous: the 1 x 4 KiB step). The larger of two, so a step whose requests a loaded
  // executor split in two bursts still waits for its first part's gap. A burst larger than both gets
  // its later requests served as they come (held only while one more is readable); a smaller one
  // waits the gap, as before; either way its count is remembered.
  bool CountRequest(int64_t now) {
    if (burst_requests_ > 0 && now - last_request_ns_ > gap_ns_) {
      last_bursts_[1] = last_bursts_[0];
      last_bursts_[0] = burst_requests_;
      burst_requests_ = 0;
    }
    ++burst_requests_;
    last_request_ns_ = now;
    const int expected = std::max(last_bursts_[0], last_bursts_[1]);
    return expected > 0 && burst_requests_ >= expected;
  }

  int held_ = 0;
  int64_t burst_start_ns_ = 0, gap_ns_ = 0;
  bool gap_wait_ = false;
  // Requests of this burst and of the last two (0: none yet), and when the last came.
  int burst_requests_ = 0;
  int last_bursts_[2] = {0, 0};
  int64_t last_request_ns_ = 0;
};

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_BURST_HOLD_H_
