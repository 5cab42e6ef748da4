// The open flows' sockets and their class, so that a change of the class marks (DSCP, SO_PRIORITY)
// reaches flows already open, not only those dialed later (issue 39: a cluster controller moves a
// running job's classes to other fabric classes, and the job must not restart for it).
//
// Linux applies IP_TOS / IPV6_TCLASS / SO_PRIORITY set on a connected TCP socket to the segments it
// sends from then on (ip_setsockopt stores inet->tos and sk_priority, which every later segment's
// header and skb priority are built from), so a re-mark is a setsockopt per socket, no reconnect.
//
// Pure of TensorFlow (the C++ unit tests build it): the marks of a class come from a function given
// at construction; the transport's registry (OpenFlowRegistry) reads the settings' globals.
#ifndef GERYON_NATIVE_RENDEZVOUS_OPEN_FLOWS_H_
#define GERYON_NATIVE_RENDEZVOUS_OPEN_FLOWS_H_

#include <functional>
#include <unordered_map>
#include <utility>

#include "tsan.h"  // Mutex, MutexLock and TF's lock annotations

namespace geryon {

struct ClassMarks {
  int dscp = 0;      // 0-63, the top six bits of the TOS / traffic class byte
  int priority = 0;  // SO_PRIORITY 0-7
};

// Sets a socket's DSCP (IPv4 TOS and IPv6 traffic class: a dual-stack socket carrying IPv4 uses
// the first) and SO_PRIORITY. False when the kernel refused one of them for the socket's family.
bool ApplyMarks(int fd, const ClassMarks& marks);

class OpenFlows {
 public:
  using MarksFor = std::function<ClassMarks(int cls)>;
  // Told the DSCP a flow now carries (its counters show it).
  using OnMark = std::function<void(int dscp)>;

  explicit OpenFlows(MarksFor marks_for) : marks_for_(std::move(marks_for)) {}
  OpenFlows(const OpenFlows&) = delete;
  OpenFlows& operator=(const OpenFlows&) = delete;

  // A flow's socket of class `cls` is open: marked now with the class's current marks, under the
  // lock Remark holds, so a flow added while the marks change gets the new ones either way (here, or
  // by the Remark that follows the change).
  void Add(int fd, int cls, OnMark on_mark = {}) TF_LOCKS_EXCLUDED(mu_);

  // Forgets `fd` and closes it, under the lock: Remark never sets options on a number after it was
  // closed (and maybe reused by another socket). Closes an fd that was never added too.
  void Close(int fd) TF_LOCKS_EXCLUDED(mu_);

  // Every open flow's socket marked again with its class's current marks: the number re-marked.
  int Remark() TF_LOCKS_EXCLUDED(mu_);

  int size() const TF_LOCKS_EXCLUDED(mu_);

 private:
  struct Flow {
    int cls;
    OnMark on_mark;
  };
  void MarkLocked(int fd, const Flow& flow) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MarksFor marks_for_;
  mutable Mutex mu_;
  std::unordered_map<int, Flow> flows_ TF_GUARDED_BY(mu_);
};

// The transport's flows (consumer and producer connections), marked from the settings' class marks
// (DscpForClass, PriorityForClass). Never destroyed: connections close from threads that may run
// while the process exits.
OpenFlows& OpenFlowRegistry();

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_OPEN_FLOWS_H_
