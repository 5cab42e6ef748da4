// The burst hold (burst_hold.h): when a producer connection holds its writes for the rest of a burst
// of requests, how long, and how it learns a consumer's burst size.
#include "burst_hold.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace geryon {
namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kGap = 300 * kUs;  // hold_gap_us's default

TEST(BurstHold, OffNeverHoldsNorAsks) {
  BurstHold hold;
  int asked = 0;
  for (int i = 0; i < 5; ++i) {
    const BurstHold::Decision d = hold.OnRequest(i * kUs, /*enabled=*/false, kGap, [&] { return ++asked, true; });
    EXPECT_FALSE(d.hold);
    EXPECT_FALSE(hold.gap_wait());
  }
  EXPECT_EQ(asked, 0);  // the readable check (an ioctl) is not made
}

TEST(BurstHold, HoldsWhileMoreIsReadable) {
  BurstHold hold;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(hold.OnRequest(i * kUs, true, /*gap_ns=*/0, [] { return true; }).hold);
    EXPECT_EQ(hold.held(), i + 1);
  }
  // Nothing more readable and no gap wait: the burst is over, the writes go.
  EXPECT_FALSE(hold.OnRequest(3 * kUs, true, 0, [] { return false; }).hold);
  EXPECT_EQ(hold.held(), 0);
  EXPECT_FALSE(hold.gap_wait());
}

TEST(BurstHold, BoundedByMaxHeldRequests) {
  BurstHold hold;
  for (int i = 0; i < kMaxHeldRequests; ++i) ASSERT_TRUE(hold.OnRequest(i, true, 0, [] { return true; }).hold);
  int asked = 0;
  EXPECT_FALSE(hold.OnRequest(kMaxHeldRequests, true, 0, [&] { return ++asked, true; }).hold);
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(hold.held(), 0);
  EXPECT_TRUE(hold.OnRequest(kMaxHeldRequests + 1, true, 0, [] { return true; }).hold);  // a new hold
}

TEST(BurstHold, GapWaitWithinTheBurstWindow) {
  BurstHold hold;
  const BurstHold::Decision d = hold.OnRequest(0, true, kGap, [] { return false; });
  EXPECT_TRUE(d.hold);  // the first request of a burst, nothing more readable: wait up to the gap
  EXPECT_TRUE(hold.gap_wait());
  EXPECT_EQ(hold.gap_ns(), kGap);
  // Requests keep trickling in: held until the burst is kBurstWindowNs old.
  int64_t t = 0;
  while (t + 100 * kUs < kBurstWindowNs) {
    t += 100 * kUs;
    ASSERT_TRUE(hold.OnRequest(t, true, kGap, [] { return false; }).hold) << t;
  }
  EXPECT_FALSE(hold.OnRequest(kBurstWindowNs, true, kGap, [] { return false; }).hold);
  EXPECT_FALSE(hold.gap_wait());
}

TEST(BurstHold, EndAfterTheGapRanOut) {
  BurstHold hold;
  EXPECT_TRUE(hold.OnRequest(0, true, kGap, [] { return false; }).hold);
  hold.End();  // the gap wait's deadline passed without a request
  EXPECT_EQ(hold.held(), 0);
  // The next request starts a new burst (its window counts from it), held while more is readable;
  // alone, it is as large as the last burst (one request): no gap wait (LearnsTheBurstSize).
  EXPECT_TRUE(hold.OnRequest(10 * kBurstWindowNs, true, kGap, [] { return true; }).hold);
  EXPECT_EQ(hold.held(), 1);
  hold.End();
  const BurstHold::Decision d = hold.OnRequest(20 * kBurstWindowNs, true, kGap, [] { return false; });
  EXPECT_FALSE(d.hold);
  EXPECT_TRUE(d.gap_skipped);
}

// A consumer asks a connection for the same receives every step: once a burst as large as the
// larger of the last two is complete, no gap wait is needed for it.
TEST(BurstHold, LearnsTheBurstSize) {
  BurstHold hold;
  int64_t t = 0;
  auto step = [&](int requests) {
    int gap_waits = 0, skips = 0;
    for (int i = 0; i < requests; ++i) {
      const BurstHold::Decision d = hold.OnRequest(t, true, kGap, [] { return false; });
      gap_waits += hold.gap_wait();
      skips += d.gap_skipped;
      if (!d.hold) hold.End();
      t += 10 * kUs;
    }
    hold.End();    // the last gap wait runs out
    t += 10 * kGap;  // the next step's requests: a new burst
    return std::make_pair(gap_waits, skips);
  };
  EXPECT_EQ(step(3), std::make_pair(3, 0));  // nothing known yet: every request waits the gap
  EXPECT_EQ(step(3), std::make_pair(2, 1));  // the third completes the burst: served at once
  EXPECT_EQ(step(1), std::make_pair(1, 0));  // a smaller one waits, as before
  EXPECT_EQ(step(3), std::make_pair(2, 1));  // the larger of the last two (3) is still expected
  EXPECT_EQ(step(1), std::make_pair(1, 0));
  EXPECT_EQ(step(1), std::make_pair(1, 0));
  EXPECT_EQ(step(1), std::make_pair(0, 1));  // the last two were 1 and 1: a lone request goes at once
}

TEST(BurstHold, NoGapWaitWhenTheGapIsZero) {
  BurstHold hold;
  EXPECT_FALSE(hold.OnRequest(0, true, 0, [] { return false; }).hold);
  EXPECT_FALSE(hold.gap_wait());
}

}  // namespace
}  // namespace geryon
