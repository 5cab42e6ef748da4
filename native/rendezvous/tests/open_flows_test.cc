// The open flows' registry (open_flows.h) on real loopback TCP sockets: a re-mark changes the DSCP and
// SO_PRIORITY of connections already open, a flow added during a change gets the new marks, and a
// closed flow is never touched again.
#include "open_flows.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace geryon {
namespace {

// A connected loopback TCP pair: {client, accepted}.
std::pair<int, int> TcpPair() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  close(listener);
  return {client, accepted};
}

ClassMarks MarksOf(int fd) {
  int tos = -1, prio = -1;
  socklen_t len = sizeof(tos);
  getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &len);
  len = sizeof(prio);
  getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, &len);
  return ClassMarks{tos >> 2, prio};
}

// Class marks a test can change, read by the registry as the settings' globals are.
struct Table {
  std::atomic<int> dscp[2] = {46, 26};
  std::atomic<int> priority[2] = {6, 0};
  OpenFlows::MarksFor fn() {
    return [this](int cls) { return ClassMarks{dscp[cls].load(), priority[cls].load()}; };
  }
};

TEST(OpenFlows, AddMarksWithTheClassesCurrentMarks) {
  Table table;
  OpenFlows flows(table.fn());
  auto [a, b] = TcpPair();
  int told = -1;
  flows.Add(a, 1, [&](int dscp) { told = dscp; });
  EXPECT_EQ(MarksOf(a).dscp, 26);
  EXPECT_EQ(MarksOf(a).priority, 0);
  EXPECT_EQ(told, 26);
  EXPECT_EQ(flows.size(), 1);
  flows.Close(a);
  close(b);
  EXPECT_EQ(flows.size(), 0);
}

TEST(OpenFlows, RemarkReachesOpenFlowsOfEveryClass) {
  Table table;
  OpenFlows flows(table.fn());
  auto [a, a_peer] = TcpPair();
  auto [b, b_peer] = TcpPair();
  flows.Add(a, 0);
  int told_b = -1;
  flows.Add(b, 1, [&](int dscp) { told_b = dscp; });
  // The job's band moves: its class 0 to what class 1 had, its class 1 further down.
  table.dscp[0] = 26;
  table.priority[0] = 0;
  table.dscp[1] = 10;
  table.priority[1] = 2;
  EXPECT_EQ(flows.Remark(), 2);
  EXPECT_EQ(MarksOf(a).dscp, 26);
  EXPECT_EQ(MarksOf(a).priority, 0);
  EXPECT_EQ(MarksOf(b).dscp, 10);
  EXPECT_EQ(MarksOf(b).priority, 2);
  EXPECT_EQ(told_b, 10);
  // The peers' sockets were not listed: untouched.
  EXPECT_EQ(MarksOf(a_peer).dscp, 0);
  for (int fd : {a, b}) flows.Close(fd);
  for (int fd : {a_peer, b_peer}) close(fd);
}

TEST(OpenFlows, AClosedFlowIsNotRemarkedEvenWhenItsNumberIsReused) {
  Table table;
  OpenFlows flows(table.fn());
  auto [a, a_peer] = TcpPair();
  flows.Add(a, 0);
  flows.Close(a);
  // The kernel hands out the lowest free number: a's comes back within a few sockets (lower ones,
  // such as the pair's closed listener, go first).
  std::vector<int> others;
  int reused = -1;
  for (int i = 0; i < 8 && reused != a; ++i) {
    reused = socket(AF_INET, SOCK_STREAM, 0);
    if (reused != a) others.push_back(reused);
  }
  for (int fd : others) close(fd);
  ASSERT_EQ(reused, a);
  table.dscp[0] = 8;
  EXPECT_EQ(flows.Remark(), 0);
  EXPECT_EQ(MarksOf(reused).dscp, 0);
  close(reused);
  close(a_peer);
}

TEST(OpenFlows, FlowsAddedWhileTheMarksChangeAllEndWithTheNewMarks) {
  // Adds race a change (marks set, then Remark) on another thread: each flow is marked either by its
  // own Add (after the change) or by the Remark (listed before it), never left with the old marks.
  for (int round = 0; round < 20; ++round) {
    Table table;
    OpenFlows flows(table.fn());
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < 8; ++i) pairs.push_back(TcpPair());
    std::thread changer([&] {
      table.dscp[0] = 18;
      flows.Remark();
    });
    for (auto& [fd, peer] : pairs) flows.Add(fd, 0);
    changer.join();
    for (auto& [fd, peer] : pairs) {
      EXPECT_EQ(MarksOf(fd).dscp, 18) << "round " << round;
      flows.Close(fd);
      close(peer);
    }
  }
}

}  // namespace
}  // namespace geryon
