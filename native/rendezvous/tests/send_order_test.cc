// The send order (send_order.h): one connection's queue in urgency order with the frame half on the
// wire first, preemption between chunks, the burst hold's filter, and host order across the
// connections of a class.
#include "send_order.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace geryon {
namespace {

// What SendQueue needs of a response, and what the tests follow: how many frames are left.
struct Fake {
  uint64_t id = 0;
  int64_t key_rank = 0;
  uint64_t seq = 0;
  bool in_frame = false;
  int frames_left = 1;
};

class Queue {
 public:
  void Add(uint64_t id, int64_t rank, int frames = 1) {
    auto r = std::make_unique<Fake>();
    r->id = id;
    r->key_rank = rank;
    r->seq = seq_++;
    r->frames_left = frames;
    q.Insert(std::move(r));
  }
  // Writes one frame of the candidate, as ServerConn's write pass does between picks: the response
  // goes back to the queue unless it is done. Returns its id (0: nothing may go).
  uint64_t WriteFrame(bool holding = false) {
    Fake* c = q.Candidate(holding, NotLast);
    if (c == nullptr) return 0;
    std::unique_ptr<Fake> r = q.Take(c);
    const uint64_t id = r->id;
    if (--r->frames_left > 0) q.Put(std::move(r));
    return id;
  }
  static bool NotLast(const Fake& r) { return r.frames_left > 1; }

  SendQueue<Fake> q;

 private:
  uint64_t seq_ = 0;
};

TEST(SendQueue, UrgencyOrderThenArrival) {
  Queue q;
  q.Add(1, 5);
  q.Add(2, 1);
  q.Add(3, 3);
  q.Add(4, 1);  // the same rank as 2: after it (arrival order)
  q.Add(5, kNothingPending - 1);  // unranked (kUnranked in TF's terms) goes last
  std::vector<uint64_t> sent;
  while (uint64_t id = q.WriteFrame()) sent.push_back(id);
  EXPECT_EQ(sent, (std::vector<uint64_t>{2, 4, 3, 1, 5}));
  EXPECT_FALSE(q.q.pending());
}

TEST(SendQueue, ArrivalOrderIsRankZero) {
  Queue q;
  for (uint64_t id = 1; id <= 5; ++id) q.Add(id, 0);
  std::vector<uint64_t> sent;
  while (uint64_t id = q.WriteFrame()) sent.push_back(id);
  EXPECT_EQ(sent, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

TEST(SendQueue, MoreUrgentPreemptsAtTheNextChunkBoundary) {
  Queue q;
  q.Add(1, 5, /*frames=*/4);  // a chunked response: four chunks
  EXPECT_EQ(q.WriteFrame(), 1u);
  q.Add(2, 1, 2);  // more urgent, ready after the first chunk
  q.Add(3, 9, 1);  // less urgent: waits for both
  std::vector<uint64_t> sent;
  while (uint64_t id = q.WriteFrame()) sent.push_back(id);
  EXPECT_EQ(sent, (std::vector<uint64_t>{2, 2, 1, 1, 1, 3}));
}

TEST(SendQueue, AFrameHalfOnTheWireGoesFirst) {
  Queue q;
  q.Add(1, 5, 3);
  Fake* c = q.q.Candidate(false, Queue::NotLast);
  ASSERT_NE(c, nullptr);
  std::unique_ptr<Fake> r = q.q.Take(c);
  r->in_frame = true;  // the socket took part of its frame
  q.q.Put(std::move(r));
  EXPECT_TRUE(q.q.has_partial());
  EXPECT_TRUE(q.q.empty());
  q.Add(2, 0);  // more urgent, but nothing may go before the frame on the wire is whole
  c = q.q.Candidate(false, Queue::NotLast);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->id, 1u);
  // During a hold too (its frame must be finished whatever it is).
  EXPECT_EQ(q.q.Candidate(true, [](const Fake&) { return false; }), c);
  r = q.q.Take(c);
  EXPECT_FALSE(q.q.has_partial());
  r->in_frame = false;
  q.q.Put(std::move(r));
  EXPECT_EQ(q.q.Candidate(false, Queue::NotLast)->id, 2u);  // the frame done: the most urgent again
}

TEST(SendQueue, ABurstHoldLetsOnlyFramesThatFinishNothingGo) {
  Queue q;
  q.Add(1, 1, 1);  // a whole response: would complete out of order during the hold
  q.Add(2, 5, 3);  // a chunked one with chunks to go: its next frame finishes nothing
  EXPECT_EQ(q.WriteFrame(/*holding=*/true), 2u);
  EXPECT_EQ(q.WriteFrame(true), 2u);
  EXPECT_EQ(q.WriteFrame(true), 0u);  // its last chunk would finish it: held
  EXPECT_EQ(q.WriteFrame(false), 1u);  // the hold over: most urgent first
  EXPECT_EQ(q.WriteFrame(false), 2u);
  EXPECT_EQ(q.WriteFrame(false), 0u);
}

TEST(SendQueue, RemoveDropsAQueuedResponseNotTheFrameOnTheWire) {
  Queue q;
  q.Add(1, 1, 2);
  q.Add(2, 2);
  std::unique_ptr<Fake> r = q.q.Take(q.q.Candidate(false, Queue::NotLast));
  r->in_frame = true;
  q.q.Put(std::move(r));
  EXPECT_FALSE(q.q.Remove(1));  // half on the wire: it must be finished
  EXPECT_TRUE(q.q.Remove(2));
  EXPECT_FALSE(q.q.Remove(2));
  EXPECT_TRUE(q.q.pending());
  q.q.Clear();
  EXPECT_FALSE(q.q.pending());
}

TEST(SendQueue, HeadRankIsTheMostUrgentPending) {
  Queue q;
  EXPECT_EQ(q.q.HeadRank(kNothingPending), kNothingPending);
  EXPECT_EQ(q.q.HeadRank(7), 7);  // the one being written, out of the queue
  q.Add(1, 4);
  EXPECT_EQ(q.q.HeadRank(kNothingPending), 4);
  EXPECT_EQ(q.q.HeadRank(2), 2);
  std::unique_ptr<Fake> r = q.q.Take(q.q.first());
  r->key_rank = 1;  // (not something a connection does: ranks are fixed; here to tell partial apart)
  r->in_frame = true;
  q.q.Put(std::move(r));
  q.Add(2, 3);
  EXPECT_EQ(q.q.HeadRank(kNothingPending), 1);
  EXPECT_EQ(q.q.first_rank(), 3);
}

std::shared_ptr<std::atomic<int64_t>> Unblocked() { return std::make_shared<std::atomic<int64_t>>(0); }

TEST(HostOrder, YieldsToAMoreUrgentConnectionOfTheClass) {
  HostOrder order;
  int a, b;  // two connections (their addresses name them)
  auto a_blocked = Unblocked();
  order.Publish(&a, 3, a_blocked);
  EXPECT_TRUE(order.MoreUrgentElsewhere(&b, 5, 1000));
  EXPECT_FALSE(order.MoreUrgentElsewhere(&b, 3, 1000));  // equal ranks go together
  EXPECT_FALSE(order.MoreUrgentElsewhere(&b, 2, 1000));
  EXPECT_FALSE(order.MoreUrgentElsewhere(&a, 9, 1000));  // its own rank does not count
  order.Publish(&b, 1, Unblocked());
  EXPECT_TRUE(order.MoreUrgentElsewhere(&a, 3, 1000));  // now a yields to b
  order.Publish(&a, kNothingPending, a_blocked);         // a has nothing pending: off the order
  order.Publish(&b, kNothingPending, Unblocked());
  EXPECT_FALSE(order.MoreUrgentElsewhere(&b, 5, 1000));
}

TEST(HostOrder, AStalledConnectionStopsHoldingTheOthersBack) {
  HostOrder order;
  int a, b;
  auto a_blocked = Unblocked();
  order.Publish(&a, 1, a_blocked);
  a_blocked->store(1000);  // a's socket is full since t = 1000 with its response pending
  EXPECT_TRUE(order.MoreUrgentElsewhere(&b, 5, 1000 + kStallNs - 1));
  EXPECT_FALSE(order.MoreUrgentElsewhere(&b, 5, 1000 + kStallNs));
  a_blocked->store(0);  // a sent again
  EXPECT_TRUE(order.MoreUrgentElsewhere(&b, 5, 1000 + kStallNs));
}

TEST(HostOrder, AYieldingConnectionIsWokenOnceAtTheNextChange) {
  HostOrder order;
  int a, b;
  auto a_blocked = Unblocked();
  int wakes = 0;
  order.Publish(&a, 1, a_blocked);
  EXPECT_FALSE(order.MoreUrgentElsewhereOrWatch(&b, 1, [&] { ++wakes; }, 0));  // not yielding: no watch
  order.Publish(&a, 2, a_blocked);
  EXPECT_EQ(wakes, 0);
  EXPECT_TRUE(order.MoreUrgentElsewhereOrWatch(&b, 5, [&] { ++wakes; }, 0));
  order.Publish(&a, 2, a_blocked);  // no change: no wake
  EXPECT_EQ(wakes, 0);
  order.Publish(&a, 4, a_blocked);
  EXPECT_EQ(wakes, 1);
  order.Publish(&a, kNothingPending, a_blocked);
  EXPECT_EQ(wakes, 1);  // one-shot
  order.Publish(&a, 1, a_blocked);
  EXPECT_TRUE(order.MoreUrgentElsewhereOrWatch(&b, 5, [&] { ++wakes; }, 0));
  order.Unwatch(&b);  // b closed
  order.Publish(&a, kNothingPending, a_blocked);
  EXPECT_EQ(wakes, 1);
}

// Two connections of a class, each with its own queue, writing one frame at a time when host order
// lets them: the class's frames go out in one urgency order, as ServerConn's write passes send them.
TEST(HostOrder, OneUrgencyOrderAcrossConnections) {
  HostOrder order;
  Queue conns[2];
  std::shared_ptr<std::atomic<int64_t>> blocked[2] = {Unblocked(), Unblocked()};
  auto publish = [&](int i) { order.Publish(&conns[i], conns[i].q.HeadRank(kNothingPending), blocked[i]); };
  conns[0].Add(1, 4, 2);
  conns[0].Add(2, 6);
  conns[1].Add(3, 1, 2);
  conns[1].Add(4, 5);
  publish(0);
  publish(1);
  std::vector<uint64_t> sent;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 2; ++i) {
      Fake* c = conns[i].q.Candidate(false, Queue::NotLast);
      if (c == nullptr || order.MoreUrgentElsewhere(&conns[i], c->key_rank, 0)) continue;  // yields
      sent.push_back(conns[i].WriteFrame());
      publish(i);
    }
  }
  EXPECT_EQ(sent, (std::vector<uint64_t>{3, 3, 1, 1, 4, 2}));
}

}  // namespace
}  // namespace geryon
