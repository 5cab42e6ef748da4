// The steady clock in nanoseconds: the one time base of the data plane's deadlines, counters and
// ordering decisions (host order's stalls, the burst hold, drain rates). No TensorFlow: the C++ unit
// tests (tests/) build the pure parts with it.
#ifndef GERYON_NATIVE_RENDEZVOUS_CLOCK_H_
#define GERYON_NATIVE_RENDEZVOUS_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace geryon {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_CLOCK_H_
