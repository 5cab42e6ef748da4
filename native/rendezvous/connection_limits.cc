#include "connection_limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "classes.h"  // kMaxClasses
#include "tsan.h"
#include "tsl/platform/logging.h"
#include "tsl/platform/thread_annotations.h"

namespace geryon {
namespace {

std::atomic<int64_t> g_limit{kMinAcceptedConnections};
Mutex g_mu;  // one sizing at a time
int64_t g_tasks TF_GUARDED_BY(g_mu) = 0;       // the largest cluster sized for
int64_t g_wanted TF_GUARDED_BY(g_mu) = kMinAcceptedConnections;  // what it asked for
int64_t g_sized TF_GUARDED_BY(g_mu) = kMinAcceptedConnections;   // the limit sizing gave
int64_t g_override TF_GUARDED_BY(g_mu) = 0;  // GERYON_MAX_ACCEPTED_CONNECTIONS, 0: none

int64_t Peers(int64_t tasks) { return tasks > 1 ? tasks - 1 : 0; }

}  // namespace

AcceptedLimitPlan PlanAcceptedConnections(int64_t tasks, int64_t nofile_hard) {
  AcceptedLimitPlan plan;
  const int64_t peers = Peers(tasks);
  // One connection per peer and class, plus one per peer for a redial or probe in flight.
  plan.wanted = std::clamp<int64_t>(peers * (kMaxClasses + 1), kMinAcceptedConnections, kAcceptedConnectionsCap);
  // Besides the accepted sockets: this process dials every peer on every class when it consumes from
  // it (a PS receives the workers' gradients), and the rest of the process needs descriptors too.
  const int64_t others = peers * kMaxClasses + kReservedDescriptors;
  plan.limit = plan.wanted;
  if (nofile_hard >= 0 && plan.limit + others > nofile_hard) {
    // Never below the old fixed limit: a process that ran before keeps running the same way.
    plan.limit = std::max<int64_t>(nofile_hard - others, kMinAcceptedConnections);
  }
  plan.descriptors = plan.limit + others;
  return plan;
}

void SizeAcceptedConnections(int64_t tasks) {
  MutexLock l(g_mu);
  rlimit rl{};
  const bool have_rlimit = getrlimit(RLIMIT_NOFILE, &rl) == 0;
  const int64_t hard = !have_rlimit || rl.rlim_max == RLIM_INFINITY ? -1 : static_cast<int64_t>(rl.rlim_max);
  AcceptedLimitPlan plan = PlanAcceptedConnections(tasks, hard);
  if (tasks <= g_tasks) return;  // the usual case: a session of a cluster already sized for
  g_tasks = tasks;
  g_wanted = plan.wanted;
  g_sized = plan.limit;
  if (g_override > 0) {  // the operator's number, with the descriptors it needs
    plan.descriptors += g_override - plan.limit;
    plan.limit = g_override;
  }
  if (have_rlimit && rl.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(rl.rlim_cur) < plan.descriptors) {
    const rlim_t old_soft = rl.rlim_cur;
    const rlim_t wanted = static_cast<rlim_t>(plan.descriptors);
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
      LOG(WARNING) << "Geryon data plane: raised this process's RLIMIT_NOFILE soft limit from " << old_soft << " to "
                   << rl.rlim_cur << " (hard limit " << rl.rlim_max << "), for " << plan.limit
                   << " data-plane connections of a cluster of " << tasks << " tasks";
    } else {
      // Then the accept loop meets EMFILE before the limit, and says so.
      LOG(ERROR) << "Geryon data plane: could not raise RLIMIT_NOFILE's soft limit from " << old_soft << " to "
                 << rl.rlim_cur << ": " << std::strerror(errno);
    }
  }
  if (plan.limit < plan.wanted && g_override == 0) {
    LOG(ERROR) << "Geryon data plane: a cluster of " << tasks << " tasks may open " << plan.wanted
               << " connections to this process, but RLIMIT_NOFILE's hard limit (" << hard << ") allows "
               << plan.limit << "; raise it (ulimit -Hn, or LimitNOFILE= in a systemd unit)";
  }
  // For the largest cluster so far: more tasks want at least as many (the hard limit does not change
  // under a running process, so the cut by it is never deeper than a smaller cluster's).
  g_limit = plan.limit;
}

int64_t AcceptedConnectionLimit() { return g_limit.load(); }

bool ParseAcceptedConnectionOverride(absl::string_view value, int64_t* limit, std::string* error) {
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < 1 || parsed > kAcceptedConnectionsCap) {
    *error = absl::StrCat(kMaxAcceptedEnv, "='", value, "' is not a whole number of connections in [1, ",
                          kAcceptedConnectionsCap, "]");
    return false;
  }
  *limit = parsed;
  return true;
}

void SetAcceptedConnectionOverride(int64_t limit) {
  MutexLock l(g_mu);
  if (limit == g_override) return;
  g_override = limit;
  g_limit = limit > 0 ? limit : g_sized;
  if (limit > 0) {
    LOG(WARNING) << "Geryon data plane: " << kMaxAcceptedEnv << " sets this process's limit of accepted "
                 << "data-plane connections to " << limit << " (sizing asked for " << g_wanted << ")";
  }
}

std::string AcceptedLimitReason() {
  MutexLock l(g_mu);
  const int64_t limit = g_limit.load();
  if (g_override > 0) {
    return absl::StrCat("set by ", kMaxAcceptedEnv, "=", g_override, "; sizing for a cluster of ", g_tasks,
                        " tasks asked for ", g_wanted, ": raise or unset it (at most ", kAcceptedConnectionsCap,
                        ")");
  }
  return absl::StrCat("sized for a cluster of ", g_tasks, " tasks x ", kMaxClasses, " classes: at least ",
                      kMinAcceptedConnections, ", at most ", kAcceptedConnectionsCap,
                      limit < g_wanted ? absl::StrCat(", cut from ", g_wanted, " by RLIMIT_NOFILE's hard limit")
                                       : std::string(),
                      "; raise it with ", kMaxAcceptedEnv, " (at most ", kAcceptedConnectionsCap,
                      ") or, when it was cut, the hard RLIMIT_NOFILE (ulimit -Hn)");
}

}  // namespace geryon

// For tests and diagnostics (geryon.tf's ctypes handle).
extern "C" __attribute__((visibility("default"))) int64_t geryon_accepted_connection_limit() {
  return geryon::AcceptedConnectionLimit();
}

extern "C" __attribute__((visibility("default"))) int64_t geryon_plan_accepted_connections(int64_t tasks,
                                                                                          int64_t nofile_hard) {
  return geryon::PlanAcceptedConnections(tasks, nofile_hard).limit;
}
