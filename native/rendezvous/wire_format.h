// The data plane's wire format (README.md, "Wire protocol"): frame layouts, protocol versions, the
// limits a reader checks, the encoders both ends use and the parsers of the frames read out of a
// buffer (the event loop's FrameReader). No sockets and no TensorFlow: the C++ unit tests (tests/)
// build it alone. What needs TF's types (is a dtype one of TF's, does a shape match its bytes) is
// asked of a TensorCheck the caller passes in.
//
// Every integer is little-endian, as the host writes it (the hosts the data plane runs on are).
#ifndef GERYON_NATIVE_RENDEZVOUS_WIRE_FORMAT_H_
#define GERYON_NATIVE_RENDEZVOUS_WIRE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace geryon {

inline constexpr uint32_t kHelloMagic = 0x48595247;     // "GRYH" on the wire (little-endian)
inline constexpr uint32_t kRequestMagic = 0x51595247;   // "GRYQ"
inline constexpr uint32_t kResponseMagic = 0x53595247;  // "GRYS"
inline constexpr uint32_t kChunkMagic = 0x43595247;     // "GRYC": a piece of a chunked response (kind 3)
inline constexpr uint32_t kHelloAckMagic = 0x41595247;  // "GRYA": the producer names itself after a hello
inline constexpr uint32_t kCancelMagic = 0x58595247;    // "GRYX": the consumer gave a receive up (protocol 4)
// 2 (issue 14): requests carry the urgency rank; raw responses may come in chunks (kind 3).
// 3 (issue 16): the hello names the task it is for, and the producer answers it (ack or refusal),
// so a consumer can try a task's data-port candidates (DataPortCandidate) until it finds that task.
// 4 (issue 16): cancel frames (consumer -> producer, `u32 kCancelMagic, u64 id`): an aborted receive
// tells the producer, which drops the queued response or stops sending its chunks.
// 5 (issue 16): error responses carry the Status's payloads (error_frame.h), as TF's gRPC does, so
// the consumer's Status is the producer's (kWorkerPossiblyRestarted and the like). Refusal frames
// (id 0) have no payload section: their layout stays that of every version.
inline constexpr uint16_t kProtocolVersion = 5;
// A request's rank for an edge that resolves to no parameter: unranked, and counted as unresolved by
// the producer as by the consumer. Any negative rank was already read as unranked, so the order a
// producer serves in is unchanged by it.
inline constexpr int32_t kUnresolvedRank = -1;
inline constexpr uint32_t kMaxKeyBytes = 64 * 1024;
inline constexpr uint32_t kMaxTaskBytes = 1024;
inline constexpr uint32_t kMaxDims = 254;  // TensorShape's own limit
inline constexpr uint64_t kMaxProtoBytes = (1ull << 31) - 1;
inline constexpr uint32_t kMaxErrorBytes = 1 << 20;
// A hello's class must be below this (classes.h kMaxClasses; checked equal where both are seen).
inline constexpr uint16_t kWireClasses = 8;
// The largest chunk frame's payload (transport.h kMaxChunkBytes; checked equal where both are seen).
inline constexpr uint64_t kMaxChunkFrameBytes = uint64_t{1} << 30;
inline constexpr uint8_t kRaw = 0, kProto = 1, kError = 2, kRawChunked = 3;
// A response's head without its dims: u32 magic, u64 id, u8 kind, u8 dead, u16 0, then u32 dtype,
// u32 ndims, dims, u64 nbytes (an error's: u32 code, u32 length, message).
inline constexpr size_t kResponseHeadBytes = 32;
// A request: u32 magic, u64 id, i64 step, i32 rank, u32 key length, then the key.
inline constexpr uint32_t kRequestHeadBytes = 28;
inline constexpr size_t kCancelFrameBytes = 12;  // u32 magic, u64 id
inline constexpr size_t kChunkHeadBytes = 24;    // u32 magic, u64 id, u64 offset, u32 length
// An error response with this id (never a request's: ids start at 1) answers the hello: the producer
// refuses the connection (the task is not in its cluster spec, or not at that address) and closes.
inline constexpr uint64_t kRefusalId = 0;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// "0x" digits as absl::Hex writes them (lowercase, no leading zeros), for the error texts.
std::string HexText(uint32_t v);

// ---- encoders ----------------------------------------------------------------------------------

// The consumer's hello: `u32 kHelloMagic, u16 version, u16 class, u16 n, n bytes (its task), u16 m,
// m bytes (the task it is for)`.
std::string HelloFrame(const std::string& local_task, int cls, const std::string& target_task);
// The producer's answer to a hello: `u32 kHelloAckMagic, u16 n, n bytes` naming this task.
std::string HelloAckFrame(const std::string& local_task);
// The answer to a hello that is refused: an error frame with kRefusalId, status code `code` and a
// message naming this task. Its layout is the same in every protocol version, so an older consumer
// reads it too. `code` is FailedPrecondition for a permanent refusal (not a task of the cluster,
// another protocol) and Unavailable for a transient one (this process is at its connection limit);
// a consumer before that distinction takes every refusal as permanent.
std::string RefusalFrame(const std::string& local_task, const std::string& why, uint32_t code);
// A request's head (the key follows it): written on the stack, no allocation per request.
void EncodeRequestHead(char (&head)[kRequestHeadBytes], uint64_t id, int64_t step_id, int32_t rank,
                       uint32_t key_len);
void EncodeCancel(char (&frame)[kCancelFrameBytes], uint64_t id);
// Appends a chunk frame's head: `u32 kChunkMagic, u64 id, u64 offset, u32 length`.
void AppendChunkHead(std::string* out, uint64_t id, uint64_t offset, uint32_t len);

// ---- parsers -----------------------------------------------------------------------------------

// kNeedMore: the buffer holds only part of the frame (parse again from its start when more came);
// kFailed: `*error` says what is malformed (the flow is out of step and ends).
enum class WireParse { kDone, kNeedMore, kFailed };

// The fields of a frame head, read out of a buffer without consuming it: a head that is not whole
// yet is parsed again from its start at the next wake-up (a few dozen bytes).
class Fields {
 public:
  Fields(const char* data, size_t n) : data_(data), n_(n) {}
  template <typename T>
  bool Get(T* v) {
    if (n_ - at_ < sizeof(T)) return false;
    std::memcpy(v, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  const char* Take(size_t n) {
    if (n_ - at_ < n) return nullptr;
    const char* p = data_ + at_;
    at_ += n;
    return p;
  }
  size_t at() const { return at_; }

 private:
  const char* const data_;
  const size_t n_;
  size_t at_ = 0;
};

struct Hello {
  uint16_t version = 0, cls = 0;
  std::string task, target;  // the consumer's task, and the task it is for
  size_t bytes = 0;          // the frame's size (what the caller consumes)
};
// The hello, as the producer reads it: a bad magic is refused after 4 bytes, another version after
// 6 (`*refused`: the consumer is told why; the rest of an unknown version's hello may not be laid
// out as ours), then the class and the two task names are checked.
WireParse ParseHello(const char* data, size_t n, Hello* hello, std::string* error, bool* refused);

// A frame from the consumer: a request, or a cancel (protocol 4).
struct ConsumerFrame {
  bool cancel = false;
  uint64_t id = 0;
  int64_t step_id = 0;
  int32_t rank = 0;         // as sent: kUnresolvedRank, another negative one, or a rank
  const char* key = nullptr;  // inside the buffer parsed
  uint32_t key_len = 0;
  size_t bytes = 0;  // the frame's size (what the caller consumes)
};
WireParse ParseConsumerFrame(const char* data, size_t n, ConsumerFrame* frame, std::string* error);

// What a response head's reader needs of TensorFlow: whether `dtype` is a valid DataType whose
// tensors are sent raw (memcpy-able, not DT_INVALID), and whether `dims` make a valid shape of
// exactly `nbytes` bytes of that dtype.
class TensorCheck {
 public:
  virtual ~TensorCheck() = default;
  virtual bool RawDtype(uint32_t dtype) const = 0;
  virtual bool ShapeMatches(uint32_t dtype, const int64_t* dims, uint32_t ndims, uint64_t nbytes) const = 0;
};

// The head of a frame from the producer: a response's (every kind) or a chunk's.
struct ProducerHead {
  bool chunk = false;
  uint64_t id = 0;
  // A response: its kind and dead bit; raw kinds also dtype, dims and nbytes, kProto nbytes; an
  // error's rest (code, message, payloads) is not part of the head (it may exceed the buffer).
  uint8_t kind = 0;
  bool is_dead = false;
  uint32_t dtype = 0, ndims = 0;
  int64_t dims[kMaxDims];
  uint64_t nbytes = 0;
  uint64_t header_bytes = 0;  // raw kinds: the head's bytes on the wire (16 + 16 + 8 x ndims)
  // A chunk: offset and length of its payload, which follows the head.
  uint64_t offset = 0;
  uint32_t len = 0;
  size_t bytes = 0;  // the head's size in the buffer (what the caller consumes)
};
// Checked field by field (same limits, same error texts as the reader thread had before the event
// loop). A chunk of 0 bytes or more than kMaxChunkFrameBytes is malformed; a raw response whose dtype
// is not raw, with more than kMaxDims dims, or whose bytes do not match the shape; a proto of more
// than kMaxProtoBytes; an unknown kind.
WireParse ParseProducerHead(const char* data, size_t n, const TensorCheck& check, ProducerHead* head,
                            std::string* error);

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_WIRE_FORMAT_H_
