// The producer's send order (README.md, "Ordering and chunking"), apart from sockets and TensorFlow
// so that the C++ unit tests (tests/) exercise it as the connections use it:
//   SendQueue   one connection's pending responses in urgency order, the frame half on the wire first;
//   HostOrder   one urgency order per process and class across its connections (sender_order=host);
//   ChunkSizer  the chunk size from a connection's measured drain rate (chunk_scale=link).
// The burst hold, which decides when a connection may write at all, is burst_hold.h.
#ifndef GERYON_NATIVE_RENDEZVOUS_SEND_ORDER_H_
#define GERYON_NATIVE_RENDEZVOUS_SEND_ORDER_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "clock.h"
#include "tsan.h"

namespace geryon {

// Host order (sender_order=host): one urgency order per process and class across its producer
// connections. Each connection publishes the rank of its most urgent pending response (queued, half
// sent, or being written); a connection about to start a response or a chunk of rank r yields while
// another connection of the class has published a rank below r. Equal ranks go together; unranked
// (kUnranked) is last by value. Per connection, order inside its own queue is unchanged.
// A more urgent connection whose socket has been full for kStallNs (it waits for EPOLLOUT with a
// response pending: its consumer does not read, or its path is congested) stops holding the others
// back: the order is kept against senders that can send, never at the price of idling the link
// behind a stuck consumer.
inline constexpr int64_t kNothingPending = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kStallNs = 100 * 1000 * 1000;
inline constexpr int64_t kHostPollNs = 5 * 1000 * 1000;  // a yielding connection re-checks (a stall) this often

class HostOrder {
 public:
  // The order of class `cls` (0 <= cls < kMaxClasses), for the process's lifetime (producer_conn.cc).
  static HostOrder& ForClass(int cls);

  // `blocked_since`: the connection's NowNs() since when its socket is full with a response pending
  // (it waits for EPOLLOUT), 0 otherwise. kNothingPending: the connection has nothing pending.
  void Publish(const void* conn, int64_t rank, const std::shared_ptr<std::atomic<int64_t>>& blocked_since);

  // True if another connection of the class has a more urgent response pending and can send it.
  // `now`: NowNs() (the tests pass their own, for stalls).
  bool MoreUrgentElsewhere(const void* conn, int64_t rank, int64_t now = NowNs());

  // As MoreUrgentElsewhere; when true, `wake` runs (once, on the publishing thread) at the next
  // change any connection of the class publishes, so the yielding connection checks again then
  // (a stall, which publishes nothing, is the caller's timer's: kHostPollNs). Checked and
  // registered under one lock, so no change falls between them.
  bool MoreUrgentElsewhereOrWatch(const void* conn, int64_t rank, const std::function<void()>& wake,
                                  int64_t now = NowNs());

  // The connection is closed: no wake for it any more.
  void Unwatch(const void* conn);

 private:
  struct Head {
    int64_t rank;
    std::shared_ptr<std::atomic<int64_t>> blocked_since;
  };

  bool MoreUrgentLocked(const void* conn, int64_t rank, int64_t now) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  std::unordered_map<const void*, Head> heads_ TF_GUARDED_BY(mu_);  // a few connections per class
  std::unordered_map<const void*, std::function<void()>> watchers_ TF_GUARDED_BY(mu_);
};

// One connection's responses not yet (wholly) sent. `R` has `int64_t key_rank` and `uint64_t seq`
// (its place: (rank, seq) in urgency order, (0, seq) in arrival order, fixed when it is queued; seq
// counts responses per connection, so ties keep arrival order) and `bool in_frame` (a frame of it is
// half on the wire). A std::map keyed (rank, seq): insert and pick-first are O(log n), a few hundred
// ns for the tens of responses a connection holds. The frame half on the wire (`partial`) is kept
// apart: once a frame is started it must be finished before anything else is written to the socket.
// Preemption between chunks falls out of this: a chunked response goes back to the queue after each
// chunk (Put), and the next pick takes whatever is most urgent then. The caller locks (ServerConn::mu_).
template <typename R>
class SendQueue {
 public:
  using Key = std::pair<int64_t, uint64_t>;

  void Insert(std::unique_ptr<R> r) {
    Key key{r->key_rank, r->seq};
    queue_.emplace(key, std::move(r));
  }
  bool empty() const { return queue_.empty(); }  // the queue, not counting the partial frame
  size_t size() const { return queue_.size(); }
  bool has_partial() const { return partial_ != nullptr; }
  bool pending() const { return partial_ != nullptr || !queue_.empty(); }
  R* first() const { return queue_.empty() ? nullptr : queue_.begin()->second.get(); }
  int64_t first_rank() const { return queue_.begin()->first.first; }

  // What a writer may send next: the frame half on the wire, else the most urgent queued response,
  // but during a burst hold (`holding`) only one whose next frame does not finish it
  // (`not_last(const R&)`). nullptr: nothing may go now.
  template <typename NotLast>
  R* Candidate(bool holding, NotLast not_last) const {
    if (partial_) return partial_.get();
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (!holding || not_last(*it->second)) return it->second.get();
    }
    return nullptr;
  }
  // Takes `r`, which Candidate (or first) returned, out of the queue.
  std::unique_ptr<R> Take(R* r) {
    if (partial_.get() == r) return std::move(partial_);
    auto it = queue_.find(Key{r->key_rank, r->seq});
    std::unique_ptr<R> out = std::move(it->second);
    queue_.erase(it);
    return out;
  }
  // `r` was written as far as it goes now: a frame half on the wire goes next (partial), anything
  // else back to its place in the queue. (Done ones are dropped by the caller, not put back.)
  void Put(std::unique_ptr<R> r) {
    if (r->in_frame) {
      partial_ = std::move(r);
    } else {
      Insert(std::move(r));
    }
  }
  // Drops the queued response with `id` (not the partial frame: it must be finished); true if found.
  bool Remove(uint64_t id) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->second->id == id) {
        queue_.erase(it);
        return true;
      }
    }
    return false;
  }
  void Clear() {
    queue_.clear();
    partial_.reset();
  }
  // The most urgent rank pending: `writing` (the rank of one being written, out of the queue, or
  // kNothingPending), the partial frame's, the queue's first.
  int64_t HeadRank(int64_t writing) const {
    int64_t head = writing;
    if (partial_) head = std::min(head, partial_->key_rank);
    if (!queue_.empty()) head = std::min(head, queue_.begin()->first.first);
    return head;
  }

 private:
  std::map<Key, std::unique_ptr<R>> queue_;
  std::unique_ptr<R> partial_;  // a frame half on the wire: goes next
};

// FrameChunk's drain-rate window: a few chunks' time even at 10 Gbit/s (256 KiB: 0.2 ms), short
// against a large response (100 MB: 80 ms at 10 Gbit/s).
inline constexpr int64_t kDrainWindowNs = 1000 * 1000;

// The next chunk's payload bytes (sender option chunk_scale, transport.h): `base` while the
// connection drains at up to 10 Gbit/s (kChunkBaseBytesPerNs); faster, as many bytes as `base` takes
// at 10 Gbit/s, at most max(base, kMaxScaledChunkBytes), in whole pages and never below `base`. So a
// more urgent response still waits about as long for a chunk boundary, while the per-chunk cost (a
// pick, a frame head, a sendmsg, a wake-up of the consumer's loop) is paid less often.
// The drain rate is what left the socket (what it took less what it still holds: the caller's
// `left()`) over windows of at least kDrainWindowNs of one busy period, so neither the socket buffer
// filling at the start nor an idle spell counts as speed: Reset() when a connection has nothing to
// send, and the next busy period measures its own rate.
class ChunkSizer {
 public:
  // kChunkBaseBytesPerNs and kMaxScaledChunkBytes (transport.h), passed in so this needs no TF.
  ChunkSizer(double base_bytes_per_ns, int64_t max_scaled_bytes)
      : base_per_ns_(base_bytes_per_ns), max_scaled_(max_scaled_bytes) {}

  // `left()`: bytes that have left the socket so far (cumulative). `*measured` (may be null) is set
  // when a window closed and the rate was measured anew.
  template <typename Left>
  size_t Next(size_t base, int64_t now, Left left, bool* measured = nullptr) {
    if (window_ns_ == 0) {
      window_ns_ = now;
      window_left_ = left();
    } else if (now - window_ns_ >= kDrainWindowNs) {
      const uint64_t l = left();
      const uint64_t drained = l > window_left_ ? l - window_left_ : 0;
      drain_per_ns_ = static_cast<double>(drained) / static_cast<double>(now - window_ns_);
      if (measured != nullptr) *measured = true;
      window_ns_ = now;
      window_left_ = l;
    }
    if (drain_per_ns_ <= base_per_ns_) return base;
    const double cap = std::max(static_cast<double>(base), static_cast<double>(max_scaled_));
    const double scaled = std::min(cap, static_cast<double>(base) * drain_per_ns_ / base_per_ns_);
    return std::max(base, static_cast<size_t>(scaled) & ~size_t{4095});  // whole pages, never below base
  }
  void Reset() { window_ns_ = 0; }
  double bytes_per_ns() const { return drain_per_ns_; }  // the last rate measured (0: none yet)

 private:
  const double base_per_ns_;
  const int64_t max_scaled_;
  int64_t window_ns_ = 0;     // the open window's start (0: none)
  uint64_t window_left_ = 0;  // the bytes that had left the socket then
  double drain_per_ns_ = 0;
};

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_SEND_ORDER_H_
