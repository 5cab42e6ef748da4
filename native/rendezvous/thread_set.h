// The transport's threads (ThreadSet).
#ifndef GERYON_NATIVE_RENDEZVOUS_THREAD_SET_H_
#define GERYON_NATIVE_RENDEZVOUS_THREAD_SET_H_

#include <pthread.h>

#include <cstdint>
#include <functional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tsl/platform/logging.h"
#include "tsan.h"

namespace geryon {

// The transport's threads: the accept loop, the event loop that reads and writes every connection
// (accepted and dialed), and short-lived ones (a connect, a hello's DNS lookup). No connection has a
// thread of its own (until issue 16 an accepted one had a reader and a writer, a dialed one a
// reader). Each one ends when its socket does (or its work); the set joins those that ended
// whenever it starts another (so it holds about one entry per connect in progress), and on Stop()
// wakes every one through its `stop` (shutdown of its socket, the loop's Stop) and joins
// them all. The owner is the TcpTransport, which lives as long as the process (server.cc releases
// it: TF's rendezvous managers keep a raw pointer to it and TF never destroys a GrpcServer), so no
// thread outlives the object whose members it uses.
class ThreadSet {
 public:
  ~ThreadSet() { Stop(); }

  // Runs `body` on a new thread named `name` (at most 15 characters: the kernel's limit; "geryon_..."
  // so that top -H, /proc/<pid>/task/*/comm and tests/tf/test_scale.py tell the data plane's threads
  // from TF's, where an unnamed thread would carry its creator's name, often a TF pool's); `stop` must
  // make it return soon (called at most once, from Stop). After Stop, starts nothing and returns false.
  bool Spawn(const char* name, std::function<void()> body, std::function<void()> stop) {
    MutexLock l(mu_);
    if (stopped_) return false;
    ReapLocked();
    uint64_t id = next_id_++;
    Entry& e = threads_[id];
    e.stop = std::move(stop);
    try {
      e.thread = std::thread([this, id, name, body = std::move(body)] {
        pthread_setname_np(pthread_self(), name);
        body();
        MutexLock l(mu_);
        ended_.push_back(id);
      });
    } catch (const std::system_error& err) {  // EAGAIN: out of threads (pids cgroup, RLIMIT_NPROC)
      LOG(ERROR) << "Geryon data plane: cannot start a thread: " << err.what();
      threads_.erase(id);
      return false;
    }
    return true;
  }

  void Stop() {
    std::unordered_map<uint64_t, Entry> threads;
    {
      MutexLock l(mu_);
      stopped_ = true;
      threads.swap(threads_);
      ended_.clear();
    }
    for (auto& [id, e] : threads) e.stop();
    for (auto& [id, e] : threads) e.thread.join();
  }

  size_t size() {
    MutexLock l(mu_);
    return threads_.size();
  }

 private:
  struct Entry {
    std::thread thread;
    std::function<void()> stop;
  };

  // A thread in ended_ has left its body and only returns: the join is immediate.
  void ReapLocked() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (uint64_t id : ended_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      it->second.thread.join();
      threads_.erase(it);
    }
    ended_.clear();
  }

  Mutex mu_;
  bool stopped_ TF_GUARDED_BY(mu_) = false;
  uint64_t next_id_ TF_GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, Entry> threads_ TF_GUARDED_BY(mu_);
  std::vector<uint64_t> ended_ TF_GUARDED_BY(mu_);
};

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_THREAD_SET_H_
