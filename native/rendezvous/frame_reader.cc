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

bool FrameReader::Fill(size_t need, std::string* error) {
  if (buffered() >= need) return true;
  if (capacity_ - begin_ < need) {
    // Not enough room behind the unread bytes: move them to the front (at most a header's worth,
    // since bodies that do not fit are read around the buffer).
    std::memmove(buffer_.get(), buffer_.get() + begin_, buffered());
    end_ -= begin_;
    begin_ = 0;
  }
  while (buffered() < need) {
    size_t room = capacity_ - end_;
    if (after_direct_) room = std::min(room, std::max(need - buffered(), kRefillAfterDirect));
    after_direct_ = false;
    ssize_t r = recv(fd_, buffer_.get() + end_, room, 0);
    ++recv_calls_;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      *error = RecvError(r);
      return false;
    }
    end_ += static_cast<size_t>(r);
  }
  return true;
}

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
  while (true) {
    ssize_t r = recv(fd_, buffer_.get() + end_, capacity_ - end_, MSG_DONTWAIT);
    ++recv_calls_;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Got::kWouldBlock;
    if (r <= 0) {
      *error = RecvError(r);
      return Got::kClosed;
    }
    end_ += static_cast<size_t>(r);
    return Got::kData;
  }
}

bool FrameReader::Read(void* out, size_t n, std::string* error) {
  const size_t have = buffered();
  if (n <= have) {
    std::memcpy(out, buffer_.get() + begin_, n);
    begin_ += n;
    return true;
  }
  char* p = static_cast<char*>(out);
  std::memcpy(p, buffer_.get() + begin_, have);
  begin_ = end_ = 0;  // empty: the next refill starts at the front
  p += have;
  const size_t rest = n - have;
  if (rest >= kDirectBytes || rest > capacity_) {
    // A large body: straight into its destination (the tensor's buffer), no copy.
    ++recv_calls_;  // at least one; RecvExact loops for the rest
    after_direct_ = true;
    return RecvExact(fd_, p, rest, error);
  }
  if (!Fill(rest, error)) return false;
  std::memcpy(p, buffer_.get() + begin_, rest);
  begin_ += rest;
  return true;
}

const char* FrameReader::Take(size_t n, std::string* error) {
  if (n > capacity_) {
    *error = "frame field larger than the reader's buffer";
    return nullptr;
  }
  if (!Fill(n, error)) return nullptr;
  const char* at = buffer_.get() + begin_;
  begin_ += n;
  return at;
}

bool FrameReader::Discard(uint64_t n, std::string* error) {
  while (n > 0) {
    if (buffered() == 0) {
      begin_ = end_ = 0;
      if (!Fill(1, error)) return false;
    }
    const size_t skip = static_cast<size_t>(std::min<uint64_t>(n, buffered()));
    begin_ += skip;
    n -= skip;
  }
  return true;
}

}  // namespace geryon
