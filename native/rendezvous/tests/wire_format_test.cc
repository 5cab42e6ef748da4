// The wire format (wire_format.h): every frame round-trips through its encoder and parser, a frame
// cut short anywhere asks for more, and every malformed field is refused with the error the
// connections log.
#include "wire_format.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

namespace geryon {
namespace {

// TF's dtypes as far as the parser asks (DT_FLOAT = 1, 4 bytes; DT_DOUBLE = 2, 8 bytes;
// DT_STRING = 7: valid, but not raw).
class FakeCheck : public TensorCheck {
 public:
  bool RawDtype(uint32_t dtype) const override { return dtype == 1 || dtype == 2; }
  bool ShapeMatches(uint32_t dtype, const int64_t* dims, uint32_t ndims, uint64_t nbytes) const override {
    uint64_t n = 1;
    for (uint32_t i = 0; i < ndims; ++i) {
      if (dims[i] < 0) return false;
      n *= static_cast<uint64_t>(dims[i]);
    }
    return n * (dtype == 1 ? 4 : 8) == nbytes;
  }
};

std::string RawHead(uint64_t id, uint8_t kind, bool dead, uint32_t dtype, std::vector<int64_t> dims, uint64_t nbytes) {
  std::string h;
  Put<uint32_t>(&h, kResponseMagic);
  Put<uint64_t>(&h, id);
  h += std::string{static_cast<char>(kind), static_cast<char>(dead ? 1 : 0), 0, 0};
  Put<uint32_t>(&h, dtype);
  Put<uint32_t>(&h, static_cast<uint32_t>(dims.size()));
  for (int64_t d : dims) Put<int64_t>(&h, d);
  Put<uint64_t>(&h, nbytes);
  return h;
}

std::string HelloBytes(uint32_t magic, uint16_t version, uint16_t cls, const std::string& task, const std::string& target) {
  std::string h;
  Put<uint32_t>(&h, magic);
  Put<uint16_t>(&h, version);
  Put<uint16_t>(&h, cls);
  Put<uint16_t>(&h, static_cast<uint16_t>(task.size()));
  h += task;
  Put<uint16_t>(&h, static_cast<uint16_t>(target.size()));
  h += target;
  return h;
}

TEST(HexText, AsAbslHexWritesIt) {
  EXPECT_EQ(HexText(0x53595247), "53595247");
  EXPECT_EQ(HexText(0), "0");
  EXPECT_EQ(HexText(0xabc), "abc");
}

TEST(Hello, RoundTrips) {
  const std::string frame = HelloFrame("/job:worker/replica:0/task:3", 2, "/job:ps/replica:0/task:0");
  EXPECT_EQ(frame, HelloBytes(kHelloMagic, kProtocolVersion, 2, "/job:worker/replica:0/task:3", "/job:ps/replica:0/task:0"));
  Hello h;
  std::string error;
  bool refused = false;
  ASSERT_EQ(ParseHello(frame.data(), frame.size(), &h, &error, &refused), WireParse::kDone) << error;
  EXPECT_EQ(h.version, kProtocolVersion);
  EXPECT_EQ(h.cls, 2);
  EXPECT_EQ(h.task, "/job:worker/replica:0/task:3");
  EXPECT_EQ(h.target, "/job:ps/replica:0/task:0");
  EXPECT_EQ(h.bytes, frame.size());
  // What follows the hello in the buffer is not part of it.
  const std::string more = frame + "GRYQ";
  ASSERT_EQ(ParseHello(more.data(), more.size(), &h, &error, &refused), WireParse::kDone);
  EXPECT_EQ(h.bytes, frame.size());
}

TEST(Hello, EveryPrefixNeedsMore) {
  const std::string frame = HelloFrame("/job:worker/replica:0/task:0", 0, "/job:ps/replica:0/task:0");
  for (size_t n = 0; n < frame.size(); ++n) {
    Hello h;
    std::string error;
    bool refused = false;
    EXPECT_EQ(ParseHello(frame.data(), n, &h, &error, &refused), WireParse::kNeedMore) << n;
  }
}

TEST(Hello, MalformedAreRefused) {
  struct Case {
    std::string frame;
    size_t refused_after;  // the bytes after which the parser knows
    std::string error;
    bool refused;
  };
  const std::string t = "/job:worker/replica:0/task:0";
  const Case cases[] = {
      {HelloBytes(0x12345678, kProtocolVersion, 0, t, t), 4, "malformed hello (bad magic 0x12345678)", false},
      {HelloBytes(kHelloMagic, 4, 0, t, t), 6,
       "refused: the consumer speaks Geryon data-plane protocol version 4, this producer speaks version 5; run the "
       "same Geryon release on every task",
       true},
      {HelloBytes(kHelloMagic, kProtocolVersion, 8, t, t), 10, "malformed hello (version 5, class 8, task name of 28 bytes)",
       false},
      {HelloBytes(kHelloMagic, kProtocolVersion, 0, "", t), 10, "malformed hello (version 5, class 0, task name of 0 bytes)",
       false},
      {HelloBytes(kHelloMagic, kProtocolVersion, 0, std::string(kMaxTaskBytes + 1, 'x'), t), 10,
       "malformed hello (version 5, class 0, task name of 1025 bytes)", false},
      {HelloBytes(kHelloMagic, kProtocolVersion, 0, t, ""), 10 + t.size() + 2, "malformed hello (target task name of 0 bytes)",
       false},
      {HelloBytes(kHelloMagic, kProtocolVersion, 0, t, std::string(kMaxTaskBytes + 1, 'y')), 10 + t.size() + 2,
       "malformed hello (target task name of 1025 bytes)", false},
  };
  for (const Case& c : cases) {
    for (size_t n = c.refused_after; n <= c.frame.size(); n += std::max<size_t>(1, c.frame.size() / 7)) {
      Hello h;
      std::string error;
      bool refused = false;
      ASSERT_EQ(ParseHello(c.frame.data(), n, &h, &error, &refused), WireParse::kFailed) << c.error << " at " << n;
      EXPECT_EQ(error, c.error);
      EXPECT_EQ(refused, c.refused);
    }
    Hello h;
    std::string error;
    bool refused = false;
    EXPECT_EQ(ParseHello(c.frame.data(), c.refused_after - 1, &h, &error, &refused), WireParse::kNeedMore) << c.error;
  }
}

TEST(HelloAck, Layout) {
  const std::string ack = HelloAckFrame("/job:ps/replica:0/task:1");
  Fields f(ack.data(), ack.size());
  uint32_t magic;
  uint16_t n;
  ASSERT_TRUE(f.Get(&magic) && f.Get(&n));
  EXPECT_EQ(magic, kHelloAckMagic);
  ASSERT_EQ(n, 24);
  EXPECT_EQ(std::string(f.Take(n), n), "/job:ps/replica:0/task:1");
  EXPECT_EQ(f.at(), ack.size());
}

TEST(Refusal, IsAnErrorFrameWithIdZero) {
  const std::string frame = RefusalFrame("/job:ps/replica:0/task:0", "refused: x", 9);
  FakeCheck check;
  ProducerHead h;
  std::string error;
  ASSERT_EQ(ParseProducerHead(frame.data(), frame.size(), check, &h, &error), WireParse::kDone) << error;
  EXPECT_FALSE(h.chunk);
  EXPECT_EQ(h.id, kRefusalId);
  EXPECT_EQ(h.kind, kError);
  EXPECT_EQ(h.bytes, 16u);
  Fields f(frame.data() + h.bytes, frame.size() - h.bytes);
  uint32_t code, len;
  ASSERT_TRUE(f.Get(&code) && f.Get(&len));
  EXPECT_EQ(code, 9u);
  const std::string msg = "Geryon data plane: /job:ps/replica:0/task:0 refused: x";
  ASSERT_EQ(len, msg.size());
  EXPECT_EQ(std::string(f.Take(len), len), msg);
  EXPECT_EQ(f.at(), frame.size() - h.bytes);  // no payload section: the same layout in every version
}

TEST(Request, RoundTrips) {
  char head[kRequestHeadBytes];
  EncodeRequestHead(head, 77, -5, kUnresolvedRank, 3);
  const std::string frame = std::string(head, sizeof(head)) + "k;e" + "tail";
  ConsumerFrame r;
  std::string error;
  ASSERT_EQ(ParseConsumerFrame(frame.data(), frame.size(), &r, &error), WireParse::kDone) << error;
  EXPECT_FALSE(r.cancel);
  EXPECT_EQ(r.id, 77u);
  EXPECT_EQ(r.step_id, -5);
  EXPECT_EQ(r.rank, kUnresolvedRank);
  EXPECT_EQ(std::string(r.key, r.key_len), "k;e");
  EXPECT_EQ(r.bytes, kRequestHeadBytes + 3);
  for (size_t n = 0; n < kRequestHeadBytes + 3; ++n) {
    EXPECT_EQ(ParseConsumerFrame(frame.data(), n, &r, &error), WireParse::kNeedMore) << n;
  }
}

TEST(Request, KeyLengthsOutOfBoundsAreRefused) {
  for (uint32_t len : {0u, kMaxKeyBytes + 1, 0xffffffffu}) {
    char head[kRequestHeadBytes];
    EncodeRequestHead(head, 1, 1, 0, len);
    ConsumerFrame r;
    std::string error;
    ASSERT_EQ(ParseConsumerFrame(head, sizeof(head), &r, &error), WireParse::kFailed) << len;
    EXPECT_EQ(error, "malformed request (key of " + std::to_string(len) + " bytes)");
  }
  char head[kRequestHeadBytes];
  EncodeRequestHead(head, 1, 1, 0, kMaxKeyBytes);
  ConsumerFrame r;
  std::string error;
  EXPECT_EQ(ParseConsumerFrame(head, sizeof(head), &r, &error), WireParse::kNeedMore);  // the largest key is fine
}

TEST(Request, BadMagicIsRefused) {
  const std::string frame = "GRYSxxxxxxxx";
  ConsumerFrame r;
  std::string error;
  ASSERT_EQ(ParseConsumerFrame(frame.data(), 4, &r, &error), WireParse::kFailed);
  EXPECT_EQ(error, "malformed frame (bad magic 0x53595247)");
}

TEST(Cancel, RoundTrips) {
  char frame[kCancelFrameBytes];
  EncodeCancel(frame, 0x1122334455667788ull);
  ConsumerFrame r;
  std::string error;
  ASSERT_EQ(ParseConsumerFrame(frame, sizeof(frame), &r, &error), WireParse::kDone);
  EXPECT_TRUE(r.cancel);
  EXPECT_EQ(r.id, 0x1122334455667788ull);
  EXPECT_EQ(r.bytes, kCancelFrameBytes);
  for (size_t n = 0; n < kCancelFrameBytes; ++n) {
    EXPECT_EQ(ParseConsumerFrame(frame, n, &r, &error), WireParse::kNeedMore) << n;
  }
}

TEST(ResponseHead, RawRoundTrips) {
  FakeCheck check;
  for (uint8_t kind : {kRaw, kRawChunked}) {
    const std::string head = RawHead(42, kind, true, 1, {3, 5}, 60);
    ASSERT_EQ(head.size(), kResponseHeadBytes + 16);
    ProducerHead h;
    std::string error;
    ASSERT_EQ(ParseProducerHead(head.data(), head.size(), check, &h, &error), WireParse::kDone) << error;
    EXPECT_EQ(h.id, 42u);
    EXPECT_EQ(h.kind, kind);
    EXPECT_TRUE(h.is_dead);
    EXPECT_EQ(h.dtype, 1u);
    ASSERT_EQ(h.ndims, 2u);
    EXPECT_EQ(h.dims[0], 3);
    EXPECT_EQ(h.dims[1], 5);
    EXPECT_EQ(h.nbytes, 60u);
    EXPECT_EQ(h.header_bytes, 16 + 16 + 16u);
    EXPECT_EQ(h.bytes, head.size());
    for (size_t n = 0; n < head.size(); ++n) {
      EXPECT_EQ(ParseProducerHead(head.data(), n, check, &h, &error), WireParse::kNeedMore) << n;
    }
  }
  // A scalar: no dims.
  const std::string scalar = RawHead(1, kRaw, false, 2, {}, 8);
  ProducerHead h;
  std::string error;
  ASSERT_EQ(ParseProducerHead(scalar.data(), scalar.size(), check, &h, &error), WireParse::kDone) << error;
  EXPECT_EQ(h.ndims, 0u);
  EXPECT_EQ(h.bytes, kResponseHeadBytes);
}

TEST(ResponseHead, MalformedAreRefused) {
  FakeCheck check;
  struct Case {
    std::string head;
    std::string error;
  };
  std::string unknown_kind;
  Put<uint32_t>(&unknown_kind, kResponseMagic);
  Put<uint64_t>(&unknown_kind, 1);
  unknown_kind += std::string{7, 0, 0, 0};
  std::string big_proto;
  Put<uint32_t>(&big_proto, kResponseMagic);
  Put<uint64_t>(&big_proto, 1);
  big_proto += std::string{static_cast<char>(kProto), 0, 0, 0};
  Put<uint64_t>(&big_proto, kMaxProtoBytes + 1);
  const Case cases[] = {
      {RawHead(1, kRaw, false, 0, {1}, 4), "malformed tensor frame (dtype 0, 1 dims)"},
      {RawHead(1, kRaw, false, 7, {1}, 4), "malformed tensor frame (dtype 7, 1 dims)"},      // not raw
      {RawHead(1, kRaw, false, 999, {1}, 4), "malformed tensor frame (dtype 999, 1 dims)"},  // not a dtype
      {RawHead(1, kRawChunked, false, 1, std::vector<int64_t>(kMaxDims + 1, 1), 4),
       "malformed tensor frame (dtype 1, 255 dims)"},
      {RawHead(1, kRaw, false, 1, {3, 5}, 61), "malformed tensor frame (61 bytes do not match the shape)"},
      {RawHead(1, kRaw, false, 1, {-1}, 4), "malformed tensor frame (4 bytes do not match the shape)"},
      {unknown_kind, "malformed frame (unknown kind 7)"},
      {big_proto, "malformed tensor frame (2147483648 proto bytes)"},
      {"XXXXXXXXXXXXXXXX", "malformed frame (bad magic 0x58585858)"},
  };
  for (const Case& c : cases) {
    ProducerHead h;
    std::string error;
    EXPECT_EQ(ParseProducerHead(c.head.data(), c.head.size(), check, &h, &error), WireParse::kFailed) << c.error;
    EXPECT_EQ(error, c.error);
  }
}

TEST(ResponseHead, ProtoAndErrorHeads) {
  FakeCheck check;
  std::string proto;
  Put<uint32_t>(&proto, kResponseMagic);
  Put<uint64_t>(&proto, 9);
  proto += std::string{static_cast<char>(kProto), 1, 0, 0};
  Put<uint64_t>(&proto, kMaxProtoBytes);  // the largest is fine
  ProducerHead h;
  std::string error;
  ASSERT_EQ(ParseProducerHead(proto.data(), proto.size(), check, &h, &error), WireParse::kDone) << error;
  EXPECT_EQ(h.kind, kProto);
  EXPECT_TRUE(h.is_dead);
  EXPECT_EQ(h.nbytes, kMaxProtoBytes);
  EXPECT_EQ(h.bytes, 24u);
  EXPECT_EQ(ParseProducerHead(proto.data(), 23, check, &h, &error), WireParse::kNeedMore);
}

TEST(ChunkHead, RoundTrips) {
  std::string head;
  AppendChunkHead(&head, 5, 1 << 20, 4096);
  ASSERT_EQ(head.size(), kChunkHeadBytes);
  FakeCheck check;
  ProducerHead h;
  std::string error;
  ASSERT_EQ(ParseProducerHead(head.data(), head.size(), check, &h, &error), WireParse::kDone) << error;
  EXPECT_TRUE(h.chunk);
  EXPECT_EQ(h.id, 5u);
  EXPECT_EQ(h.offset, 1u << 20);
  EXPECT_EQ(h.len, 4096u);
  EXPECT_EQ(h.bytes, kChunkHeadBytes);
  for (size_t n = 0; n < head.size(); ++n) {
    EXPECT_EQ(ParseProducerHead(head.data(), n, check, &h, &error), WireParse::kNeedMore) << n;
  }
}

TEST(ChunkHead, LengthsOutOfBoundsAreRefused) {
  FakeCheck check;
  for (uint64_t len : {uint64_t{0}, kMaxChunkFrameBytes + 1, uint64_t{0xffffffff}}) {
    std::string head;
    AppendChunkHead(&head, 5, 0, static_cast<uint32_t>(len));
    ProducerHead h;
    std::string error;
    ASSERT_EQ(ParseProducerHead(head.data(), head.size(), check, &h, &error), WireParse::kFailed) << len;
    EXPECT_EQ(error, "malformed chunk frame (" + std::to_string(len) + " bytes)");
  }
  std::string head;
  AppendChunkHead(&head, 5, 0, static_cast<uint32_t>(kMaxChunkFrameBytes));
  ProducerHead h;
  std::string error;
  EXPECT_EQ(ParseProducerHead(head.data(), head.size(), check, &h, &error), WireParse::kDone);
}

}  // namespace
}  // namespace geryon
