// The buffered frame reader (frame_reader.h).
#include "frame_reader.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace geryon {
namespace {

// The same words for the same failures on every read path (the tests and logs look for them).
std::string RecvError(ssize_t r) {
  if (r == 0) return "connection closed by peer";
  if (errno == EAGAIN || errno == EWOULDBLOCK) return "timed out waiting for data";
  return std::string(strerror(errno));
}

}  // namespace

bool RecvExact(int fd, void* out, size_t n, std::string* error) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      *error = RecvError(r);
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

FrameReader::FrameReader(int fd, size_t capacity)
    : fd_(fd), capacity_(capacity), buffer_(new char[capacity]) {}

FrameReader::Got FrameReader::RecvAvailable(std::string* error) {
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (begin_ > 0) {
    // At most one frame's unread part (whole frames were consumed): usually a few bytes.
    std::memmove(buffer_.get(), buffer_.get() + begin_, buffered());
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == capacity_) {
    *error = "frame larger than the reader's buffer";
    return Got::kClosed;
  }
  size_t room = capacity_ - end_;
  // Right after a body went straight to its destination: the next header, not a slice of the next
  // large body (which would then be copied out of the buffer).
  if (after_direct_) room = std::min(room, kRefillAfterDirect);
  while (true) {
    ssize_t r = recv(fd_, buffer_.get() + end_, room, MSG_DONTWAIT);
    ++recv_calls_;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Got::kWouldBlock;
    if (r <= 0) {
      *error = RecvError(r);
      return Got::kClosed;
    }
    end_ += static_cast<size_t>(r);
    after_direct_ = false;
    return Got::kData;
  }
}

FrameReader::Got FrameReader::RecvDirect(void* out, size_t n, size_t* got, std::string* error) {
  *got = 0;
  if (buffered() > 0) {  // a caller's bug: these bytes come first
    *error = "a direct read with bytes still buffered";
    return Got::kClosed;
  }
  while (true) {
    ssize_t r = recv(fd_, out, n, MSG_DONTWAIT);
    ++recv_calls_;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Got::kWouldBlock;
    if (r <= 0) {
      *error = RecvError(r);
      return Got::kClosed;
    }
    *got = static_cast<size_t>(r);
    after_direct_ = true;
    return Got::kData;
  }
}

}  // namespace geryon
