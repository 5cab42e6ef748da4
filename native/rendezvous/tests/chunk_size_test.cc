// Chunk sizes from the drain rate (send_order.h ChunkSizer, sender option chunk_scale=link): the
// configured size up to 10 Gbit/s, proportionally more above, capped, in whole pages.
#include <gtest/gtest.h>

#include <cstdint>

#include "send_order.h"

namespace geryon {
namespace {

constexpr double kBase = 1.25;                   // 10 Gbit/s in bytes per ns (transport.h kChunkBaseBytesPerNs)
constexpr int64_t kMaxScaled = int64_t{4} << 20;  // transport.h kMaxScaledChunkBytes
constexpr size_t k256K = 256 * 1024;

// A socket that drains `per_ns` bytes per ns from t = 0 (what left it, cumulative).
struct Link {
  double per_ns;
  int64_t now = 0;
  uint64_t left() const { return static_cast<uint64_t>(per_ns * static_cast<double>(now)); }
};

size_t After(ChunkSizer* sizer, Link* link, int64_t ns, size_t base = k256K, bool* measured = nullptr) {
  link->now += ns;
  return sizer->Next(base, link->now, [link] { return link->left(); }, measured);
}

TEST(ChunkSizer, TheBaseSizeUntilARateIsMeasured) {
  ChunkSizer sizer(kBase, kMaxScaled);
  Link link{10.0};  // 80 Gbit/s, but nothing measured yet
  bool measured = false;
  EXPECT_EQ(After(&sizer, &link, 1, k256K, &measured), k256K);  // opens the window
  EXPECT_FALSE(measured);
  EXPECT_EQ(After(&sizer, &link, kDrainWindowNs / 2, k256K, &measured), k256K);  // the window is too young
  EXPECT_FALSE(measured);
  EXPECT_EQ(sizer.bytes_per_ns(), 0);
}

TEST(ChunkSizer, UpToTenGbitTheBaseSize) {
  ChunkSizer sizer(kBase, kMaxScaled);
  Link link{kBase};
  After(&sizer, &link, 1);
  bool measured = false;
  EXPECT_EQ(After(&sizer, &link, kDrainWindowNs, k256K, &measured), k256K);
  EXPECT_TRUE(measured);
  EXPECT_NEAR(sizer.bytes_per_ns(), kBase, 1e-6);
}

TEST(ChunkSizer, FasterLinksTakeProportionallyLargerChunks) {
  ChunkSizer sizer(kBase, kMaxScaled);
  Link link{2 * kBase};  // 20 Gbit/s: a chunk takes as long as 256 KiB at 10 Gbit/s
  After(&sizer, &link, 1);
  EXPECT_EQ(After(&sizer, &link, kDrainWindowNs), 2 * k256K);
}

TEST(ChunkSizer, WholePagesNeverBelowTheBase) {
  ChunkSizer sizer(kBase, kMaxScaled);
  Link link{1.5 * kBase};
  After(&sizer, &link, 1, 10000);
  const size_t chunk = After(&sizer, &link, kDrainWindowNs, 10000);
  EXPECT_EQ(chunk, 12288u);  // 15000 rounded down to pages
  EXPECT_EQ(chunk % 4096, 0u);
  Link slow_start{1.1 * kBase};
  ChunkSizer s2(kBase, kMaxScaled);
  After(&s2, &slow_start, 1, 10000);
  EXPECT_EQ(After(&s2, &slow_start, kDrainWindowNs, 10000), 10000u);  // 11000 -> 8192 pages < base: the base
}

TEST(ChunkSizer, CappedAtMaxScaledUnlessTheBaseIsLarger) {
  ChunkSizer sizer(kBase, kMaxScaled);
  Link link{100 * kBase};
  After(&sizer, &link, 1);
  EXPECT_EQ(After(&sizer, &link, kDrainWindowNs), static_cast<size_t>(kMaxScaled));
  const size_t big = size_t{8} << 20;  // chunk_bytes above the cap: never scaled below itself
  EXPECT_EQ(After(&sizer, &link, 1, big), big);
}

TEST(ChunkSizer, ANewBusyPeriodOpensANewWindow) {
  ChunkSizer sizer(kBase, kMaxScaled);
  Link link{2 * kBase};
  After(&sizer, &link, 1);
  EXPECT_EQ(After(&sizer, &link, kDrainWindowNs), 2 * k256K);
  sizer.Reset();  // nothing to send: the idle spell does not count as speed
  link.per_ns = 0;  // idle: nothing leaves
  link.now += 10 * kDrainWindowNs;
  bool measured = false;
  // The last rate stays in force until the new window closes.
  EXPECT_EQ(After(&sizer, &link, 1, k256K, &measured), 2 * k256K);
  EXPECT_FALSE(measured);
}

TEST(ChunkSizer, BytesThatDidNotLeaveCountAsNone) {
  ChunkSizer sizer(kBase, kMaxScaled);
  uint64_t left = 1000000;
  int64_t now = 1;
  sizer.Next(k256K, now, [&] { return left; });
  left = 10;  // less than before (cannot happen on a socket): no negative rate
  now += kDrainWindowNs;
  EXPECT_EQ(sizer.Next(k256K, now, [&] { return left; }), k256K);
  EXPECT_EQ(sizer.bytes_per_ns(), 0);
}

}  // namespace
}  // namespace geryon
