// One epoll loop that reads and writes every data-plane connection of a transport, accepted and
// dialed (issue 16: "one event loop per process instead of two threads per connection"). Until then
// each accepted connection had a reader thread of its own (blocking reads of its hello, requests and
// cancel frames) and a writer thread (blocking sends of its responses), and each dialed one a reader
// (blocking reads of its responses); now the loop waits on all their sockets, for reading and, while
// a connection has bytes the socket did not take, for writing, so no connection costs a thread.
//
// Level-triggered: a readable socket gets one non-blocking recv() per wake-up and a writable one a
// few non-blocking sends, so one busy peer cannot starve the others. Deadlines (the hello's 10 s,
// the burst hold's gap wait of hundreds of microseconds, host order's re-check) come from one
// timerfd, armed to the earliest of them. Handlers run on the loop thread only and must not block:
// anything that may (a DNS lookup) goes to another thread, whose result comes back through Post.
#ifndef GERYON_NATIVE_RENDEZVOUS_EVENT_LOOP_H_
#define GERYON_NATIVE_RENDEZVOUS_EVENT_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tsan.h"

namespace geryon {

class EventLoop {
 public:
  // A connection the loop reads (and writes, WatchWrite). Every callback runs on the loop thread.
  class Handler {
   public:
    virtual ~Handler() = default;
    virtual int fd() const = 0;
    // Registered: the loop watches the socket from now on (a handler sets its first deadline here).
    virtual void OnAdded() = 0;
    // The socket is readable, at EOF or in error (the handler's recv says which).
    virtual void OnReadable() = 0;
    // The socket is writable (or in error: the handler's send says so); only while WatchWrite is on.
    virtual void OnWritable() {}
    // The deadline set with SetTimer has passed.
    virtual void OnTimer() = 0;
    // The loop is stopping: the handler closes its connection. The loop forgets it afterwards.
    virtual void OnStop() = 0;
  };

  EventLoop() = default;
  ~EventLoop();  // Run must have returned (the transport joins the loop's thread first)
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // The epoll, wake-up and timer descriptors; false with `*error` (their errno text).
  bool Init(std::string* error);
  // The loop itself, on its own thread, until Stop. Handlers still registered then get OnStop.
  void Run();
  // Any thread: Run returns soon.
  void Stop();

  // Any thread: the loop registers `h` and starts watching its socket. False once stopped (the
  // caller then closes the connection itself). The handoff is under the loop's mutex, so what the
  // adding thread did to `h` happens before the loop's first callback.
  bool Add(std::shared_ptr<Handler> h);
  // Any thread: `f` runs on the loop thread (soon); dropped if the loop stops first. Posted from
  // the loop thread itself (a handler's callback) it runs after the current batch of events,
  // without a wake-up (no eventfd write), before the loop waits again.
  void Post(std::function<void()> f);

  // Loop thread only. The loop stops watching `h` and drops its reference after the current
  // callback returns; no callback of `h` runs after this.
  void Remove(Handler* h);
  // Loop thread only: stop or resume watching `h`'s socket for reading (its timer and write
  // interest are unaffected).
  void Watch(Handler* h, bool on);
  // Loop thread only: watch `h`'s socket for writing too (OnWritable while the socket is writable,
  // level-triggered), or no longer. For TCP "writable" is the kernel's sk_stream_is_writeable: the
  // free room at least half the bytes queued, not merely room for the next send, so a handler that
  // stops sending while the socket still takes bytes should not wait for it (ServerConn::WritePass).
  void WatchWrite(Handler* h, bool on);
  // Loop thread only: OnTimer runs once at `deadline_ns` (steady clock, NowNs), replacing any
  // deadline set before; ClearTimer removes it. One per handler: a handler with several deadlines
  // sets the earliest and sees in OnTimer which are due (ServerConn::ArmTimer).
  void SetTimer(Handler* h, int64_t deadline_ns);
  void ClearTimer(Handler* h);

  // The clock of SetTimer: CLOCK_MONOTONIC, which std::chrono::steady_clock is on Linux.
  static int64_t NowNs();
  // Handlers registered now (loop thread only; for tests and logs).
  size_t size() const { return entries_.size(); }

 private:
  void Wake();  // makes epoll_wait return (Add, Post, Stop)

  struct Entry {
    std::shared_ptr<Handler> handler;
    int64_t deadline = 0;  // 0: no timer
    bool watching = false;  // for reading (Watch)
    bool writing = false;   // for writing (WatchWrite)
    bool in_epoll = false;  // the descriptor is in the epoll set (watching or writing)
    bool removed = false;
  };

  void Register(std::shared_ptr<Handler> h);
  void RunPosted();
  void RunTimers();
  void ArmTimer();
  void StopAll();
  Entry* Find(Handler* h);
  // epoll_ctl to the interest `e`'s flags say (ADD, MOD or DEL); false if the kernel refused.
  bool Update(Entry* e);
  bool InLoop() const;

  int epoll_fd_ = -1, wake_fd_ = -1, timer_fd_ = -1;
  Mutex mu_;
  bool stopping_ TF_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<Handler>> adding_ TF_GUARDED_BY(mu_);
  std::vector<std::function<void()>> posted_ TF_GUARDED_BY(mu_);
  // The loop thread's own from here on.
  std::unordered_map<Handler*, std::unique_ptr<Entry>> entries_;
  // Removed during a batch of events: freed after it, since a later event of the same batch may
  // still point at the entry (it is skipped: `removed`).
  std::vector<std::unique_ptr<Entry>> removed_;
  std::set<std::pair<int64_t, Entry*>> timers_;
  int64_t armed_ = 0;  // the timerfd's deadline (0: disarmed or fired)
  // Posted from the loop thread (Post): run after the current batch of events.
  std::vector<std::function<void()>> deferred_;
  std::atomic<std::thread::id> loop_thread_{};  // set when Run starts
};

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_EVENT_LOOP_H_
