// The wire format's encoders and parsers (wire_format.h). The error texts are those the connections
// logged and failed flows with before the format had a file of its own; tests look for some of them.
#include "wire_format.h"

#include <cstdio>

namespace geryon {

std::string HexText(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%x", static_cast<unsigned>(v));
  return buf;
}

std::string HelloFrame(const std::string& local_task, int cls, const std::string& target_task) {
  std::string hello;
  Put<uint32_t>(&hello, kHelloMagic);
  Put<uint16_t>(&hello, kProtocolVersion);
  Put<uint16_t>(&hello, static_cast<uint16_t>(cls));
  Put<uint16_t>(&hello, static_cast<uint16_t>(local_task.size()));
  hello += local_task;
  Put<uint16_t>(&hello, static_cast<uint16_t>(target_task.size()));
  hello += target_task;
  return hello;
}

std::string HelloAckFrame(const std::string& local_task) {
  std::string frame;
  Put<uint32_t>(&frame, kHelloAckMagic);
  Put<uint16_t>(&frame, static_cast<uint16_t>(local_task.size()));
  frame += local_task;
  return frame;
}

std::string RefusalFrame(const std::string& local_task, const std::string& why, uint32_t code) {
  std::string msg = "Geryon data plane: " + local_task + " " + why;
  std::string frame;
  Put<uint32_t>(&frame, kResponseMagic);
  Put<uint64_t>(&frame, kRefusalId);
  frame += std::string{static_cast<char>(kError), 0, 0, 0};
  Put<uint32_t>(&frame, code);
  Put<uint32_t>(&frame, static_cast<uint32_t>(msg.size()));
  frame += msg;
  return frame;
}

void EncodeRequestHead(char (&head)[kRequestHeadBytes], uint64_t id, int64_t step_id, int32_t rank,
                       uint32_t key_len) {
  std::memcpy(head, &kRequestMagic, 4);
  std::memcpy(head + 4, &id, 8);
  std::memcpy(head + 12, &step_id, 8);
  std::memcpy(head + 20, &rank, 4);
  std::memcpy(head + 24, &key_len, 4);
}

void EncodeCancel(char (&frame)[kCancelFrameBytes], uint64_t id) {
  std::memcpy(frame, &kCancelMagic, 4);
  std::memcpy(frame + 4, &id, 8);
}

void AppendChunkHead(std::string* out, uint64_t id, uint64_t offset, uint32_t len) {
  Put<uint32_t>(out, kChunkMagic);
  Put<uint64_t>(out, id);
  Put<uint64_t>(out, offset);
  Put<uint32_t>(out, len);
}

WireParse ParseHello(const char* p, size_t have, Hello* hello, std::string* error, bool* refused) {
  uint32_t magic;
  uint16_t version, cls, task_len, target_len;
  if (have < 4) return WireParse::kNeedMore;
  std::memcpy(&magic, p, 4);
  if (magic != kHelloMagic) {
    *error = "malformed hello (bad magic 0x" + HexText(magic) + ")";
    return WireParse::kFailed;
  }
  if (have < 6) return WireParse::kNeedMore;
  std::memcpy(&version, p + 4, 2);
  if (version != kProtocolVersion) {
    // Another release of Geryon: refused with both versions named, before reading further (the
    // rest of an unknown version's hello may not be laid out as ours).
    *error = "refused: the consumer speaks Geryon data-plane protocol version " + std::to_string(version) +
             ", this producer speaks version " + std::to_string(kProtocolVersion) +
             "; run the same Geryon release on every task";
    *refused = true;
    return WireParse::kFailed;
  }
  if (have < 10) return WireParse::kNeedMore;
  std::memcpy(&cls, p + 6, 2);
  std::memcpy(&task_len, p + 8, 2);
  if (cls >= kWireClasses || task_len == 0 || task_len > kMaxTaskBytes) {
    *error = "malformed hello (version " + std::to_string(version) + ", class " + std::to_string(cls) +
             ", task name of " + std::to_string(task_len) + " bytes)";
    return WireParse::kFailed;
  }
  const size_t target_at = 10 + size_t{task_len};
  if (have < target_at + 2) return WireParse::kNeedMore;
  std::memcpy(&target_len, p + target_at, 2);
  if (target_len == 0 || target_len > kMaxTaskBytes) {
    *error = "malformed hello (target task name of " + std::to_string(target_len) + " bytes)";
    return WireParse::kFailed;
  }
  if (have < target_at + 2 + target_len) return WireParse::kNeedMore;
  hello->version = version;
  hello->cls = cls;
  hello->task.assign(p + 10, task_len);
  hello->target.assign(p + target_at + 2, target_len);
  hello->bytes = target_at + 2 + target_len;
  return WireParse::kDone;
}

WireParse ParseConsumerFrame(const char* p, size_t have, ConsumerFrame* frame, std::string* error) {
  if (have < 4) return WireParse::kNeedMore;
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  if (magic == kCancelMagic) {
    if (have < kCancelFrameBytes) return WireParse::kNeedMore;
    frame->cancel = true;
    std::memcpy(&frame->id, p + 4, 8);
    frame->bytes = kCancelFrameBytes;
    return WireParse::kDone;
  }
  if (magic != kRequestMagic) {
    *error = "malformed frame (bad magic 0x" + HexText(magic) + ")";
    return WireParse::kFailed;
  }
  if (have < kRequestHeadBytes) return WireParse::kNeedMore;
  uint32_t key_len;
  std::memcpy(&key_len, p + 24, 4);
  if (key_len == 0 || key_len > kMaxKeyBytes) {
    *error = "malformed request (key of " + std::to_string(key_len) + " bytes)";
    return WireParse::kFailed;
  }
  if (have < kRequestHeadBytes + key_len) return WireParse::kNeedMore;
  frame->cancel = false;
  std::memcpy(&frame->id, p + 4, 8);  // u64 id, i64 step, i32 rank, u32 n
  std::memcpy(&frame->step_id, p + 12, 8);
  std::memcpy(&frame->rank, p + 20, 4);
  frame->key = p + kRequestHeadBytes;
  frame->key_len = key_len;
  frame->bytes = kRequestHeadBytes + key_len;
  return WireParse::kDone;
}

namespace {

// "GRYC" u64 id, u64 offset, u32 len; `f` is past the magic.
WireParse ParseChunkHead(Fields* f, ProducerHead* h, std::string* error) {
  const char* head = f->Take(20);
  if (head == nullptr) return WireParse::kNeedMore;
  h->chunk = true;
  std::memcpy(&h->id, head, 8);
  std::memcpy(&h->offset, head + 8, 8);
  std::memcpy(&h->len, head + 16, 4);
  if (h->len == 0 || h->len > kMaxChunkFrameBytes) {
    *error = "malformed chunk frame (" + std::to_string(h->len) + " bytes)";
    return WireParse::kFailed;
  }
  h->bytes = f->at();
  return WireParse::kDone;
}

}  // namespace

WireParse ParseProducerHead(const char* data, size_t n, const TensorCheck& check, ProducerHead* h,
                            std::string* error) {
  Fields f(data, n);
  uint32_t magic;
  if (!f.Get(&magic)) return WireParse::kNeedMore;
  if (magic == kChunkMagic) return ParseChunkHead(&f, h, error);
  if (magic != kResponseMagic) {
    *error = "malformed frame (bad magic 0x" + HexText(magic) + ")";
    return WireParse::kFailed;
  }
  // u64 id, u8 kind, u8 is_dead, u16 0
  const char* head = f.Take(12);
  if (head == nullptr) return WireParse::kNeedMore;
  h->chunk = false;
  std::memcpy(&h->id, head, 8);
  h->kind = static_cast<uint8_t>(head[8]);
  h->is_dead = head[9] != 0;
  if (h->kind == kError) {
    // Its message (up to kMaxErrorBytes) and payloads may not fit the buffer: gathered apart.
    h->bytes = f.at();
    return WireParse::kDone;
  }
  if (h->kind == kRaw || h->kind == kRawChunked) {
    uint32_t dtype, ndims;
    if (!f.Get(&dtype) || !f.Get(&ndims)) return WireParse::kNeedMore;
    if (dtype == 0 || !check.RawDtype(dtype) || ndims > kMaxDims) {
      *error = "malformed tensor frame (dtype " + std::to_string(dtype) + ", " + std::to_string(ndims) + " dims)";
      return WireParse::kFailed;
    }
    const char* dims_at = f.Take(ndims * sizeof(int64_t));
    if (dims_at == nullptr) return WireParse::kNeedMore;
    if (ndims > 0) std::memcpy(h->dims, dims_at, ndims * sizeof(int64_t));
    uint64_t nbytes;
    if (!f.Get(&nbytes)) return WireParse::kNeedMore;
    if (!check.ShapeMatches(dtype, h->dims, ndims, nbytes)) {
      *error = "malformed tensor frame (" + std::to_string(nbytes) + " bytes do not match the shape)";
      return WireParse::kFailed;
    }
    h->dtype = dtype;
    h->ndims = ndims;
    h->nbytes = nbytes;
    h->header_bytes = 16 + 16 + 8ull * ndims;
    h->bytes = f.at();
    return WireParse::kDone;
  }
  if (h->kind == kProto) {
    uint64_t nbytes;
    if (!f.Get(&nbytes)) return WireParse::kNeedMore;
    if (nbytes > kMaxProtoBytes) {
      *error = "malformed tensor frame (" + std::to_string(nbytes) + " proto bytes)";
      return WireParse::kFailed;
    }
    h->nbytes = nbytes;
    h->bytes = f.at();
    return WireParse::kDone;
  }
  *error = "malformed frame (unknown kind " + std::to_string(static_cast<int>(h->kind)) + ")";
  return WireParse::kFailed;
}

}  // namespace geryon
