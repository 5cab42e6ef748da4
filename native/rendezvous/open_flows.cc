// The open flows' sockets (open_flows.h).
#include "open_flows.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace geryon {

bool ApplyMarks(int fd, const ClassMarks& marks) {
  const int tos = marks.dscp << 2;
  // Both: which one applies depends on the socket's family (IPV6_TCLASS fails on an AF_INET one).
  const bool v4 = setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) == 0;
  const bool v6 = setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos)) == 0;
  const bool prio = setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &marks.priority, sizeof(marks.priority)) == 0;
  return (v4 || v6) && prio;
}

void OpenFlows::MarkLocked(int fd, const Flow& flow) {
  const ClassMarks marks = marks_for_(flow.cls);
  ApplyMarks(fd, marks);
  if (flow.on_mark) flow.on_mark(marks.dscp);
}

void OpenFlows::Add(int fd, int cls, OnMark on_mark) {
  MutexLock l(mu_);
  Flow& flow = flows_[fd];
  flow = Flow{cls, std::move(on_mark)};
  MarkLocked(fd, flow);
}

void OpenFlows::Close(int fd) {
  MutexLock l(mu_);
  flows_.erase(fd);
  close(fd);
}

int OpenFlows::Remark() {
  MutexLock l(mu_);
  for (const auto& [fd, flow] : flows_) MarkLocked(fd, flow);
  return static_cast<int>(flows_.size());
}

int OpenFlows::size() const {
  MutexLock l(mu_);
  return static_cast<int>(flows_.size());
}

}  // namespace geryon
