// The process-wide settings and their setters (transport.h, settings.h), and their parsing from
// the environment.
#include "settings.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "burst_hold.h"  // kMaxHoldGapUs
#include "fallback.h"

namespace geryon {

std::atomic<int> g_accepted{0};

std::atomic<int> g_dscp[kMaxClasses] = {46, 26, 18, 10, 12, 20, 28, 8};
// SO_PRIORITY per class. Without the host agent the qdisc is usually pfifo_fast (or the default
// `prio`), which picks its band from the priority with prio2band = {1, 2, 2, 2, 1, 2, 0, 0, 1, ...}
// (net/sched/sch_generic.c): only 6 (TC_PRIO_INTERACTIVE) and 7 (TC_PRIO_CONTROL) reach band 0, 0
// (unmarked traffic, TC_PRIO_BESTEFFORT) is band 1, and 1, 2, 3, 5 all land in band 2, below
// unmarked traffic. So: class 0 -> 6 (band 0, ahead of everything but control), class 1 -> 0 (band 1,
// with unmarked traffic such as TF's own gRPC), classes 2-7 -> 2 (TC_PRIO_BULK, band 2). 7 stays
// free for the kernel's own control traffic. With the agent, set_class_marks replaces these with the
// priorities its DCB config maps to traffic classes.
std::atomic<int> g_priority[kMaxClasses] = {6, 0, 2, 2, 2, 2, 2, 2};
std::atomic<ResponseOrder> g_order{ResponseOrder::kUrgency};
std::atomic<int64_t> g_chunk_bytes{kDefaultChunkBytes};
// Sender settings (transport.h, "Sender settings"): host order, the burst hold, the inline write,
// and the unsent-bytes bound of producer sockets.
std::atomic<SenderOrder> g_sender_order{SenderOrder::kHost};
std::atomic<bool> g_hold{true};
std::atomic<InlineWrite> g_inline{InlineWrite::kArrival};
std::atomic<bool> g_chunk_scale{true};  // sender option chunk_scale: link (true) | off
std::atomic<int64_t> g_notsent_lowat{kDefaultNotsentLowat};
std::atomic<int64_t> g_hold_gap_ns{kDefaultHoldGapUs * 1000};

int DscpForClass(int cls) {
  if (cls < 0 || cls >= kMaxClasses) cls = kMaxClasses - 1;
  return g_dscp[cls].load(std::memory_order_relaxed);
}

int PriorityForClass(int cls) {
  if (cls < 0 || cls >= kMaxClasses) cls = kMaxClasses - 1;
  return g_priority[cls].load(std::memory_order_relaxed);
}

bool SetClassMarks(const int* dscp, const int* priority, int n) {
  if (n < 1 || n > kMaxClasses) return false;
  for (int i = 0; i < n; ++i) {
    if (dscp[i] < 0 || dscp[i] > 63 || priority[i] < 0 || priority[i] > 7) return false;
  }
  for (int i = 0; i < n; ++i) {
    g_dscp[i] = dscp[i];
    g_priority[i] = priority[i];
  }
  return true;
}

ResponseOrder CurrentResponseOrder() { return g_order.load(std::memory_order_relaxed); }

const char* ResponseOrderName(ResponseOrder order) {
  return order == ResponseOrder::kUrgency ? "urgency" : "arrival";
}

bool SetResponseOrder(absl::string_view order, std::string* error) {
  if (order == "urgency") {
    g_order = ResponseOrder::kUrgency;
  } else if (order == "arrival") {
    g_order = ResponseOrder::kArrival;
  } else {
    *error = absl::StrCat("order: '", order, "' is not one of 'urgency', 'arrival'");
    return false;
  }
  return true;
}

int64_t ChunkBytes() { return g_chunk_bytes.load(std::memory_order_relaxed); }

bool SetChunkBytes(int64_t bytes, std::string* error) {
  if (bytes < kMinChunkBytes || bytes > kMaxChunkBytes) {
    *error = absl::StrCat("chunk_bytes: ", bytes, " is not in [", kMinChunkBytes, ", ", kMaxChunkBytes,
                          "] (4 KiB to 1 GiB)");
    return false;
  }
  g_chunk_bytes = bytes;
  return true;
}

SenderOrder CurrentSenderOrder() { return g_sender_order.load(std::memory_order_relaxed); }

namespace {
bool ParseOnOff(absl::string_view value, bool* on) {
  if (value == "on") *on = true;
  else if (value == "off") *on = false;
  else return false;
  return true;
}
}  // namespace

bool SetSenderOption(absl::string_view name, absl::string_view value, std::string* error) {
  if (name == "sender_order") {
    if (value == "connection") g_sender_order = SenderOrder::kConnection;
    else if (value == "host") g_sender_order = SenderOrder::kHost;
    else return *error = absl::StrCat("sender_order: '", value, "' is not one of 'connection', 'host'"), false;
  } else if (name == "hold") {
    bool on;
    if (!ParseOnOff(value, &on)) return *error = absl::StrCat("hold: '", value, "' is not one of 'on', 'off'"), false;
    g_hold = on;
  } else if (name == "inline") {
    if (value == "off") g_inline = InlineWrite::kOff;
    else if (value == "small") g_inline = InlineWrite::kSmall;
    else if (value == "drain") g_inline = InlineWrite::kDrain;
    else if (value == "arrival") g_inline = InlineWrite::kArrival;
    else return *error = absl::StrCat("inline: '", value, "' is not one of 'arrival', 'off', 'small', 'drain'"), false;
  } else if (name == "hold_gap_us") {
    int64_t us;
    if (!absl::SimpleAtoi(value, &us) || us < 0 || us > kMaxHoldGapUs) {
      return *error = absl::StrCat("hold_gap_us: '", value, "' is not a whole number of microseconds in [0, ",
                                   kMaxHoldGapUs, "]"),
             false;
    }
    g_hold_gap_ns = us * 1000;
  } else if (name == "notsent_lowat") {
    int64_t bytes;
    if (!absl::SimpleAtoi(value, &bytes) || bytes < 0 || bytes > kMaxNotsentLowat) {
      return *error = absl::StrCat("notsent_lowat: '", value, "' is not a whole number of bytes in [0, ",
                                   kMaxNotsentLowat, "] (0: the kernel's default)"),
             false;
    }
    g_notsent_lowat = bytes;
  } else if (name == "chunk_scale") {
    if (value == "link") g_chunk_scale = true;
    else if (value == "off") g_chunk_scale = false;
    else return *error = absl::StrCat("chunk_scale: '", value, "' is not one of 'link', 'off'"), false;
  } else {
    return *error = absl::StrCat("sender option: '", name,
                                 "' is not one of 'sender_order', 'hold', 'hold_gap_us', 'inline', 'notsent_lowat', "
                                 "'chunk_scale'"),
           false;
  }
  return true;
}

std::string SenderOption(absl::string_view name) {
  if (name == "sender_order") return g_sender_order.load() == SenderOrder::kHost ? "host" : "connection";
  if (name == "hold") return g_hold.load() ? "on" : "off";
  if (name == "inline") {
    const InlineWrite w = g_inline.load();
    return w == InlineWrite::kOff ? "off" : w == InlineWrite::kSmall ? "small" : w == InlineWrite::kDrain ? "drain" : "arrival";
  }
  if (name == "hold_gap_us") return absl::StrCat(g_hold_gap_ns.load() / 1000);
  if (name == "notsent_lowat") return absl::StrCat(g_notsent_lowat.load());
  if (name == "chunk_scale") return g_chunk_scale.load() ? "link" : "off";
  return "";
}

// GERYON_ORDER and GERYON_CHUNK_BYTES, read when a server starts; a bad value fails the start
// with a message naming the variable, and changes nothing.
absl::Status OrderSettingsFromEnv() {
  std::string error;
  const char* order = std::getenv("GERYON_ORDER");
  const char* chunk = std::getenv("GERYON_CHUNK_BYTES");
  int64_t bytes = ChunkBytes();
  if (chunk != nullptr && (!absl::SimpleAtoi(chunk, &bytes) || bytes < kMinChunkBytes || bytes > kMaxChunkBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: GERYON_CHUNK_BYTES='", chunk,
                                                   "' is not a whole number of bytes in [", kMinChunkBytes, ", ",
                                                   kMaxChunkBytes, "] (4 KiB to 1 GiB)"));
  }
  if (order != nullptr && std::string(order) != "urgency" && std::string(order) != "arrival") {
    return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: GERYON_ORDER='", order,
                                                   "' is not one of 'urgency', 'arrival'"));
  }
  // The sender settings: every variable checked before any is applied, so a bad one changes nothing.
  const std::pair<const char*, const char*> sender[] = {{"GERYON_SENDER_ORDER", "sender_order"},
                                                        {"GERYON_HOLD", "hold"},
                                                        {"GERYON_HOLD_GAP_US", "hold_gap_us"},
                                                        {"GERYON_INLINE", "inline"},
                                                        {"GERYON_NOTSENT_LOWAT", "notsent_lowat"},
                                                        {"GERYON_CHUNK_SCALE", "chunk_scale"}};
  std::vector<std::pair<std::string, std::string>> apply;
  for (const auto& [var, name] : sender) {
    const char* value = std::getenv(var);
    if (value == nullptr) continue;
    const std::string before = SenderOption(name);
    if (!SetSenderOption(name, value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: ", var, "='", value, "': ", error));
    }
    SetSenderOption(name, before, &error);  // applied below, once all are valid
    apply.emplace_back(name, value);
  }
  FallbackMode fallback = FallbackMode::kOn;
  if (const char* warn = std::getenv("GERYON_FALLBACK_WARN"); warn != nullptr && !ParseFallbackMode(warn, &fallback, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: ", error));
  }
  if (order != nullptr) SetResponseOrder(order, &error);
  SetFallbackMode(fallback);
  SetChunkBytes(bytes, &error);
  for (const auto& [name, value] : apply) SetSenderOption(name, value, &error);
  return absl::OkStatus();
}

}  // namespace geryon
