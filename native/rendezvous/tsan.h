// What ThreadSanitizer needs to be told about our threads, and a mutex it can see.
//
// Only this library is instrumented under `make sanitize`; TensorFlow is not. So TSAN sees no
// synchronisation that happens inside TF's code: TF's rendezvous table is guarded by an absl::Mutex
// in libtensorflow_framework (local_rendezvous.cc, `bucket.mu`), its refcounts are atomics in TF's
// code, `tensorflow::mutex` is an absl::Mutex whose lock() is out of line in TF. An object of ours
// that one thread builds and hands to TF, and another thread gets back from TF, then looks like a
// race (native/rendezvous/README.md, "Sanitizers", the triage table).
//
// Where the object handed over is ours, the handoff is annotated here rather than suppressed: the
// sender announces it on the object's address (GERYON_HAPPENS_BEFORE) before TF gets it, the
// receiver claims it (GERYON_HAPPENS_AFTER) before touching it. That tells TSAN exactly the order
// TF's lock gives, for that object alone, so a race on anything else is still reported. Builds
// without GERYON_TSAN (set by geryon/tf/build.py for the thread variant only) compile them away.
#ifndef GERYON_RENDEZVOUS_TSAN_H_
#define GERYON_RENDEZVOUS_TSAN_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <utility>

// TF's lock annotations (clang's -Wthread-safety attributes) where TensorFlow's headers are on the
// include path, as in the library's build. The C++ unit tests (tests/) build the pure parts without
// TensorFlow: there the annotations are no-ops, as they are under gcc anyway.
#if __has_include("tensorflow/core/platform/thread_annotations.h")
#include "tensorflow/core/platform/thread_annotations.h"
#else
#define TF_GUARDED_BY(...)
#define TF_PT_GUARDED_BY(...)
#define TF_ACQUIRED_AFTER(...)
#define TF_ACQUIRED_BEFORE(...)
#define TF_EXCLUSIVE_LOCKS_REQUIRED(...)
#define TF_SHARED_LOCKS_REQUIRED(...)
#define TF_LOCKS_EXCLUDED(...)
#define TF_LOCKABLE
#define TF_SCOPED_LOCKABLE
#define TF_EXCLUSIVE_LOCK_FUNCTION(...)
#define TF_SHARED_LOCK_FUNCTION(...)
#define TF_EXCLUSIVE_TRYLOCK_FUNCTION(...)
#define TF_UNLOCK_FUNCTION(...)
#define TF_ASSERT_EXCLUSIVE_LOCK(...)
#define TF_NO_THREAD_SAFETY_ANALYSIS
#endif

#if defined(GERYON_TSAN)
// libtsan's annotation interface (gcc's <sanitizer/tsan_interface.h>; declared here so the
// build needs no sanitizer headers). __tsan_release(addr) makes everything this thread did so far
// happen before whatever a later __tsan_acquire(addr) on another thread is followed by.
extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void __tsan_ignore_thread_begin();
void __tsan_ignore_thread_end();
}
#define GERYON_HAPPENS_BEFORE(p) __tsan_release(const_cast<void*>(static_cast<const void*>(p)))
#define GERYON_HAPPENS_AFTER(p) __tsan_acquire(const_cast<void*>(static_cast<const void*>(p)))
// For reading an object TF built on another thread and handed over under its own lock (a Tensor
// in TF's rendezvous item): nothing of ours to annotate on the sending side, so the read itself
// is not recorded. Kept to single statements that only copy TF's handle into an object of ours.
#define GERYON_IGNORE_ACCESSES_BEGIN() __tsan_ignore_thread_begin()
#define GERYON_IGNORE_ACCESSES_END() __tsan_ignore_thread_end()
#else
#define GERYON_HAPPENS_BEFORE(p) ((void)(p))
#define GERYON_HAPPENS_AFTER(p) ((void)(p))
#define GERYON_IGNORE_ACCESSES_BEGIN() ((void)0)
#define GERYON_IGNORE_ACCESSES_END() ((void)0)
#endif

namespace geryon {

// Tensor bytes handed from one of our threads to another through TF's allocator. Our writer is done
// reading a tensor's buffer (its Response goes, with our reference); TF drops the last reference and
// its CPU allocator keeps the memory: large buffers come from a BFC pool (MklCPUAllocator; BFC
// frames in the TSAN logs), whose regions are malloc'd once and whose chunks are reused without an
// intercepted free/malloc, under BFC's own (invisible) lock. The next tensor there, which our
// reader allocates and fills, looks raced with the writer's sendmsg: issue 16's report
// (FrameReader::Read / RecvExact <- ReadChunk vs WriteFrom), whose location is an 8 MiB heap block
// malloc'd by the reader's own thread (a BFC region: a malloc of the tensor itself would have reset
// the shadow, erasing the earlier read). Not a real race: the writer
// reads only while its Response holds a reference, and BFC hands the memory out only after the
// last one is dropped. The new buffer may start anywhere in the old one (BFC splits and merges
// chunks), so the handoff is announced, and claimed, at the buffer's start and at every
// kBytesGrain-aligned address inside it: a reuse that overlaps the old buffer by a grain or more
// shares an address with it (a smaller overlap can still be reported). Only what the releasing
// thread did before the release is ordered: a read of the old buffer after it is still reported
// (tests/tf/test_sanitizers.py). Under TSAN only; a 64 MiB tensor costs 1,025 release/acquire
// calls (an acquire where nothing was released is a lookup).
constexpr size_t kBytesGrain = 64 * 1024;

template <typename Annotate>
inline void ForEachGrain(const void* data, size_t size, Annotate annotate) {
  if (data == nullptr || size == 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data), end = begin + size;
  annotate(begin);
  for (uintptr_t a = (begin + kBytesGrain) & ~uintptr_t{kBytesGrain - 1}; a < end; a += kBytesGrain) annotate(a);
}

// Our thread is done with the bytes [data, data + size) (it read or wrote them last for now).
inline void ReleaseBytes(const void* data, size_t size) {
#if defined(GERYON_TSAN)
  ForEachGrain(data, size, [](uintptr_t a) { GERYON_HAPPENS_BEFORE(reinterpret_cast<void*>(a)); });
#else
  (void)data;
  (void)size;
#endif
}

// Our thread takes over the bytes [data, data + size): a buffer just allocated from TF, or one TF
// passed to us with a tensor.
inline void ClaimBytes(const void* data, size_t size) {
#if defined(GERYON_TSAN)
  ForEachGrain(data, size, [](uintptr_t a) { GERYON_HAPPENS_AFTER(reinterpret_cast<void*>(a)); });
#else
  (void)data;
  (void)size;
#endif
}

// Claims `p` on entry and announces it on exit: for a method TF calls on an object of ours from
// threads of its own (the rendezvous' RecvFromRemoteAsync), between its construction and its
// destruction, which TF orders with its own (invisible) locks and refcounts.
class ScopedHandoff {
 public:
  explicit ScopedHandoff(const void* p) : p_(p) { GERYON_HAPPENS_AFTER(p_); }
  ~ScopedHandoff() { GERYON_HAPPENS_BEFORE(p_); }
  ScopedHandoff(const ScopedHandoff&) = delete;
  ScopedHandoff& operator=(const ScopedHandoff&) = delete;

 private:
  const void* const p_;
};

// A callable handed to another thread through a queue TSAN cannot see (TF's thread pool, TF's
// rendezvous): announced at its own address wherever it is constructed (std::function keeps it on
// the heap and moves only the pointer), claimed there when it runs.
template <typename F>
class Announced {
 public:
  explicit Announced(F f) : f_(std::move(f)) { GERYON_HAPPENS_BEFORE(this); }
  Announced(Announced&& o) : f_(std::move(o.f_)) { GERYON_HAPPENS_BEFORE(this); }
  Announced(const Announced& o) : f_(o.f_) { GERYON_HAPPENS_BEFORE(this); }
  Announced& operator=(const Announced&) = delete;

  template <typename... Args>
  auto operator()(Args&&... args) {
    GERYON_HAPPENS_AFTER(this);
    return f_(std::forward<Args>(args)...);
  }

 private:
  F f_;
};

// A std::mutex with TF's lock annotations, for our own members. tensorflow::mutex is an absl::Mutex
// locked inside TF's uninstrumented library, which TSAN cannot see (every member it guards looked
// unguarded: StartAbort against SetHandle in the first triage); pthread's mutex, under std::mutex,
// is intercepted. The annotations keep clang's -Wthread-safety checking the members it guards.
// Lockable, so std::unique_lock<Mutex> works where a lock is taken with std::try_to_lock and handed
// on; clang's analysis does not follow std::unique_lock, so such code states what it holds with
// AssertHeld (a no-op at run time). Elsewhere MutexLock, or UniqueLock to unlock early or wait.
class TF_LOCKABLE Mutex {
 public:
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void lock() TF_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() TF_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool try_lock() TF_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  void AssertHeld() const TF_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// A std::unique_lock<Mutex> that clang's analysis follows: locked on construction, released by
// unlock() or on destruction, and what CondVar waits with.
class TF_SCOPED_LOCKABLE UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) TF_EXCLUSIVE_LOCK_FUNCTION(mu) : lock_(mu) {}
  ~UniqueLock() TF_UNLOCK_FUNCTION() {}
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;
  void unlock() TF_UNLOCK_FUNCTION() { lock_.unlock(); }
  std::unique_lock<Mutex>& get() { return lock_; }

 private:
  std::unique_lock<Mutex> lock_;
};

// std::condition_variable for a Mutex held through a UniqueLock: it waits on the
// std::mutex inside, so it costs what std::condition_variable does (condition_variable_any would
// add a lock of its own and a shared_ptr per wait on the data plane's writer and host-order paths).
class CondVar {
 public:
  void wait(UniqueLock& lock) {
    std::unique_lock<std::mutex> inner(lock.get().mutex()->mu_, std::adopt_lock);
    cv_.wait(inner);
    inner.release();  // still held: `lock` owns it again
  }
  // As std::condition_variable's: `ready` runs with the lock held (it may read what the lock
  // guards, which clang cannot see through the lambda: such lambdas say so with AssertHeld).
  template <typename Predicate>
  void wait(UniqueLock& lock, Predicate ready) {
    while (!ready()) wait(lock);
  }
  template <typename Rep, typename Period>
  std::cv_status wait_for(UniqueLock& lock, const std::chrono::duration<Rep, Period>& timeout) {
    std::unique_lock<std::mutex> inner(lock.get().mutex()->mu_, std::adopt_lock);
    const std::cv_status status = cv_.wait_for(inner, timeout);
    inner.release();
    return status;
  }
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

class TF_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TF_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() TF_UNLOCK_FUNCTION() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace geryon

#endif  // GERYON_RENDEZVOUS_TSAN_H_
