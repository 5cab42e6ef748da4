// The data plane's epoll loop (event_loop.h).
#include "event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tsl/platform/logging.h"

namespace geryon {
namespace {

// Events taken per epoll_wait; more ready sockets are simply reported by the next call.
constexpr int kMaxEvents = 256;

}  // namespace

int64_t EventLoop::NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

EventLoop::~EventLoop() {
  for (int fd : {epoll_fd_, wake_fd_, timer_fd_}) {
    if (fd >= 0) close(fd);
  }
}

bool EventLoop::Init(std::string* error) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0 || timer_fd_ < 0) {
    *error = std::strerror(errno);
    return false;
  }
  // The two internal descriptors are told apart from connections by the address in their tag.
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &wake_fd_;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    *error = std::strerror(errno);
    return false;
  }
  ev.data.ptr = &timer_fd_;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &ev) != 0) {
    *error = std::strerror(errno);
    return false;
  }
  return true;
}

void EventLoop::Stop() {
  {
    MutexLock l(mu_);
    stopping_ = true;
  }
  Wake();
}

// One eventfd write wakes the loop's epoll_wait; a failed write (the counter at its maximum) means
// a wake-up is already pending, so it is ignored.
void EventLoop::Wake() {
  const uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

bool EventLoop::Add(std::shared_ptr<Handler> h) {
  bool wake;
  {
    MutexLock l(mu_);
    if (stopping_) return false;
    // Only the first of a batch wakes the loop: it takes everything queued when it wakes.
    wake = adding_.empty() && posted_.empty();
    adding_.push_back(std::move(h));
  }
  if (wake) Wake();
  return true;
}

bool EventLoop::InLoop() const { return loop_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id(); }

void EventLoop::Post(std::function<void()> f) {
  // From a handler's callback (e.g. a connection scheduling its write pass): no lock, no wake-up;
  // Run takes these after the current batch of events. (`loop_thread_` equals this thread's id only
  // on the loop thread, which set it; any other thread reads another id, whenever it reads it.)
  if (InLoop()) {
    deferred_.push_back(std::move(f));
    return;
  }
  bool wake;
  {
    MutexLock l(mu_);
    if (stopping_) return;
    wake = adding_.empty() && posted_.empty();
    posted_.push_back(std::move(f));
  }
  if (wake) Wake();
}

EventLoop::Entry* EventLoop::Find(Handler* h) {
  auto it = entries_.find(h);
  return it == entries_.end() ? nullptr : it->second.get();
}

void EventLoop::Register(std::shared_ptr<Handler> h) {
  auto entry = std::make_unique<Entry>();
  Entry* e = entry.get();
  e->handler = h;
  entries_[h.get()] = std::move(entry);
  Watch(h.get(), true);
  h->OnAdded();
}

void EventLoop::Watch(Handler* h, bool on) {
  Entry* e = Find(h);
  if (e == nullptr || e->watching == on) return;
  e->watching = on;
  if (!Update(e) && on) e->watching = false;  // never watched: the handler hears of it as a read that fails
}

void EventLoop::WatchWrite(Handler* h, bool on) {
  Entry* e = Find(h);
  if (e == nullptr || e->writing == on) return;
  e->writing = on;
  if (!Update(e) && on) e->writing = false;
}

bool EventLoop::Update(Entry* e) {
  uint32_t events = 0;
  // Level-triggered: what one recv() leaves in the socket is reported again by the next wait, and
  // a socket with room in its send buffer is reported writable at every wait while `writing`.
  if (e->watching) events |= EPOLLIN | EPOLLRDHUP;
  if (e->writing) events |= EPOLLOUT;
  // No interest is a delete, not a change to no events: EPOLLHUP and EPOLLERR are reported whatever
  // the mask says, and level-triggered they would wake the loop over and over.
  const int op = events == 0 ? EPOLL_CTL_DEL : e->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  if (op == EPOLL_CTL_DEL && !e->in_epoll) return true;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = e;
  if (epoll_ctl(epoll_fd_, op, e->handler->fd(), &ev) != 0) {
    LOG(ERROR) << "Geryon data plane: epoll_ctl("
               << (op == EPOLL_CTL_ADD ? "ADD" : op == EPOLL_CTL_MOD ? "MOD" : "DEL") << ") on descriptor "
               << e->handler->fd() << " failed: " << std::strerror(errno);
    if (op == EPOLL_CTL_DEL) e->in_epoll = false;  // as good as gone: the descriptor is closed next
    return false;
  }
  e->in_epoll = events != 0;
  return true;
}

void EventLoop::Remove(Handler* h) {
  auto it = entries_.find(h);
  if (it == entries_.end()) return;
  ClearTimer(h);
  // Out of the epoll set before the handler closes its descriptor, whose number may be reused at once.
  Entry* e = it->second.get();
  e->watching = e->writing = false;
  Update(e);
  e->removed = true;
  removed_.push_back(std::move(it->second));
  entries_.erase(it);
}

void EventLoop::SetTimer(Handler* h, int64_t deadline_ns) {
  Entry* e = Find(h);
  if (e == nullptr) return;
  if (e->deadline != 0) timers_.erase({e->deadline, e});
  e->deadline = deadline_ns;
  timers_.insert({deadline_ns, e});
  ArmTimer();
}

void EventLoop::ClearTimer(Handler* h) {
  Entry* e = Find(h);
  if (e == nullptr || e->deadline == 0) return;
  timers_.erase({e->deadline, e});
  e->deadline = 0;
  // The timerfd stays armed: a wake-up for a deadline that is gone finds nothing due and re-arms
  // for the next (one syscall saved per cleared deadline; a gap wait is cleared per burst request).
}

void EventLoop::ArmTimer() {
  if (timers_.empty()) return;
  const int64_t earliest = timers_.begin()->first;
  if (armed_ != 0 && armed_ <= earliest) return;  // it fires first and re-arms then
  itimerspec it{};
  it.it_value.tv_sec = static_cast<time_t>(earliest / 1000000000);
  it.it_value.tv_nsec = static_cast<long>(earliest % 1000000000);
  if (timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &it, nullptr) != 0) {
    LOG(ERROR) << "Geryon data plane: timerfd_settime failed: " << std::strerror(errno);
    return;
  }
  armed_ = earliest;
}

void EventLoop::RunTimers() {
  if (timers_.empty()) return;
  const int64_t now = NowNs();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    Entry* e = timers_.begin()->second;
    timers_.erase(timers_.begin());
    e->deadline = 0;
    if (!e->removed) e->handler->OnTimer();  // may set a new deadline (later than now)
  }
  ArmTimer();
}

void EventLoop::StopAll() {
  auto entries = std::move(entries_);
  entries_.clear();
  timers_.clear();
  for (auto& [h, e] : entries) {
    if (!e->removed) e->handler->OnStop();  // Remove from there finds nothing: the loop forgets it anyway
  }
}

void EventLoop::Run() {
  loop_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  epoll_event events[kMaxEvents];
  while (true) {
    // What handlers posted during the last batch ran after it; what those posted in turn runs after
    // the next wait, which then only polls (a write pass that re-posts itself does not starve reads).
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, deferred_.empty() ? -1 : 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // Not expected (EBADF, EINVAL): the connections can no longer be read, so they are closed.
      LOG(ERROR) << "Geryon data plane: epoll_wait failed: " << std::strerror(errno)
                 << "; closing every accepted connection";
      deferred_.clear();
      StopAll();
      loop_thread_.store(std::thread::id(), std::memory_order_relaxed);  // a later thread may get its id
      return;
    }
    bool wake = false, timer = false;
    for (int i = 0; i < n; ++i) {
      void* tag = events[i].data.ptr;
      if (tag == &wake_fd_) {
        wake = true;
        continue;
      }
      if (tag == &timer_fd_) {
        timer = true;
        continue;
      }
      Entry* e = static_cast<Entry*>(tag);
      const uint32_t got = events[i].events;
      // Skipped when removed or paused earlier in this batch. Reads first: a request read now is
      // ordered with what is queued before the write below picks.
      if (!e->removed && e->watching && (got & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
        e->handler->OnReadable();
      }
      if (!e->removed && e->writing && (got & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0) e->handler->OnWritable();
    }
    if (timer) {
      uint64_t expirations;
      ssize_t ignored = read(timer_fd_, &expirations, sizeof(expirations));
      (void)ignored;
      armed_ = 0;
    }
    // After the reads: a request that came with its deadline wins (the deadline was cleared).
    RunTimers();
    if (wake) {
      uint64_t count;
      ssize_t ignored = read(wake_fd_, &count, sizeof(count));  // before taking the queues: none is lost
      (void)ignored;
      std::vector<std::shared_ptr<Handler>> adding;
      std::vector<std::function<void()>> posted;
      bool stopping;
      {
        MutexLock l(mu_);
        adding.swap(adding_);
        posted.swap(posted_);
        stopping = stopping_;
      }
      if (stopping) {
        for (auto& h : adding) h->OnStop();  // never registered: closed all the same
        removed_.clear();
        deferred_.clear();
        StopAll();
        loop_thread_.store(std::thread::id(), std::memory_order_relaxed);
        return;
      }
      for (auto& h : adding) Register(std::move(h));
      for (auto& f : posted) f();
    }
    if (!deferred_.empty()) {
      std::vector<std::function<void()>> deferred;
      deferred.swap(deferred_);
      for (auto& f : deferred) f();  // what these post goes to deferred_ again: after the next wait
    }
    removed_.clear();
  }
}

}  // namespace geryon
