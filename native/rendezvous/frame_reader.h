// The data plane's buffered frame reader: one per connection, so that a frame's header fields (and
// the small frames behind it in a burst) come out of one recv() into a buffer instead of one recv()
// per field. Until issue 16 a response header cost about 8 recv() calls and a request about 5.
#ifndef GERYON_NATIVE_RENDEZVOUS_FRAME_READER_H_
#define GERYON_NATIVE_RENDEZVOUS_FRAME_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace geryon {

// Reads exactly n bytes from `fd` straight into `out`, with as many recv() calls as it takes; false
// with `*error` on EOF ("connection closed by peer"), a receive timeout (SO_RCVTIMEO: "timed out
// waiting for data") or a socket error (its strerror text).
bool RecvExact(int fd, void* out, size_t n, std::string* error);

// Reads a connection's frames through one buffer, without blocking. A refill is one
// recv(MSG_DONTWAIT) of whatever the socket holds, up to the buffer's free space, so fixed-size header
// fields (and the small frames behind them in a burst) are parsed out of memory. A body whose
// unbuffered rest is at least kDirectBytes long is read straight into the caller's memory after the
// caller copies the buffered prefix (RecvDirect): a tensor's bytes still go from the socket into the
// tensor's own buffer (no staging copy), while a small body costs no recv() of its own.
// Not thread-safe: one thread at a time uses it (the transport's event loop, which reads both ends'
// connections; until issue 16 a consumer's reader thread read through blocking calls, now gone).
class FrameReader {
 public:
  static constexpr size_t kDefaultCapacity = 64 * 1024;
  // Below this, the rest of a body is read into the buffer and copied (a copy of up to 16 KiB costs
  // less than a recv() of its own, and the same recv() brings the frames behind it); from this on, it
  // goes straight into the destination.
  static constexpr size_t kDirectBytes = 16 * 1024;
  // Right after a body read straight into its destination, the next refill takes at most this much:
  // the next frame's header, not a slice of the next large body that would then be copied (a 256 KiB
  // chunk behind a full 64 KiB refill had a quarter of its bytes copied twice).
  static constexpr size_t kRefillAfterDirect = 512;

  explicit FrameReader(int fd, size_t capacity = kDefaultCapacity);

  // One recv(MSG_DONTWAIT) of whatever the socket holds into the free space behind the unread bytes
  // (moved to the front first), so whole frames are parsed out of data() and dropped with Consume. kWouldBlock: nothing to read
  // now; kClosed: EOF or a socket error, `*error` in RecvExact's words, or the buffer full (a
  // frame larger than capacity(); the caller sizes the reader for its largest frame).
  enum class Got { kData, kWouldBlock, kClosed };
  Got RecvAvailable(std::string* error);
  // Non-blocking, straight into the caller's memory (a consumer's large body on the event loop, read
  // across as many wake-ups as it takes): one recv(MSG_DONTWAIT) of up to n bytes into `out`, `*got`
  // the bytes it read. Only with nothing buffered (the caller copies the buffered prefix first). The
  // next refill (RecvAvailable) then takes at most kRefillAfterDirect.
  Got RecvDirect(void* out, size_t n, size_t* got, std::string* error);
  const char* data() const { return buffer_.get() + begin_; }
  void Consume(size_t n) { begin_ += n; }

  size_t buffered() const { return end_ - begin_; }
  size_t capacity() const { return capacity_; }
  // recv() calls made so far (for tests and benches).
  uint64_t recv_calls() const { return recv_calls_; }

 private:
  const int fd_;
  const size_t capacity_;
  std::unique_ptr<char[]> buffer_;
  size_t begin_ = 0, end_ = 0;  // the unread bytes are buffer_[begin_, end_)
  bool after_direct_ = false;   // the last body went straight to its destination (kRefillAfterDirect)
  uint64_t recv_calls_ = 0;
};

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_FRAME_READER_H_
