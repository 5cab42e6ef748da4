// Host order's bookkeeping (send_order.h). SendQueue and ChunkSizer are templates in the header.
#include "send_order.h"

#include "wire_format.h"  // kWireClasses: the classes a hello may name

namespace geryon {

HostOrder& HostOrder::ForClass(int cls) {
  static HostOrder* orders = new HostOrder[kWireClasses];  // lives as long as the process
  return orders[cls];
}

void HostOrder::Publish(const void* conn, int64_t rank, const std::shared_ptr<std::atomic<int64_t>>& blocked_since) {
  std::vector<std::function<void()>> wake;
  {
    MutexLock l(mu_);
    auto it = heads_.find(conn);
    if (rank == kNothingPending) {
      if (it == heads_.end()) return;
      heads_.erase(it);
    } else if (it == heads_.end()) {
      heads_.emplace(conn, Head{rank, blocked_since});
    } else if (it->second.rank == rank) {
      return;
    } else {
      it->second.rank = rank;
    }
    if (watchers_.empty()) return;
    // Something changed: every yielding connection checks again (one-shot, as notify_all was).
    for (auto& [other, f] : watchers_) wake.push_back(std::move(f));
    watchers_.clear();
  }
  for (auto& f : wake) f();  // outside mu_: a wake posts to the event loop
}

bool HostOrder::MoreUrgentElsewhere(const void* conn, int64_t rank, int64_t now) {
  MutexLock l(mu_);
  return MoreUrgentLocked(conn, rank, now);
}

bool HostOrder::MoreUrgentElsewhereOrWatch(const void* conn, int64_t rank, const std::function<void()>& wake,
                                           int64_t now) {
  MutexLock l(mu_);
  if (!MoreUrgentLocked(conn, rank, now)) return false;
  watchers_[conn] = wake;  // a copy only when yielding
  return true;
}

void HostOrder::Unwatch(const void* conn) {
  MutexLock l(mu_);
  watchers_.erase(conn);
}

bool HostOrder::MoreUrgentLocked(const void* conn, int64_t rank, int64_t now) {
  for (const auto& [other, head] : heads_) {
    if (other == conn || head.rank >= rank) continue;
    const int64_t since = head.blocked_since->load(std::memory_order_relaxed);
    if (since == 0 || now - since < kStallNs) return true;
  }
  return false;
}

}  // namespace geryon
