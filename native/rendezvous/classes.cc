// The native map_table store. Readers (the rendezvous, per tensor) pin the current immutable
// snapshot, copy out what they need and unpin; writers (GeryonSetMapTable) build a new snapshot,
// publish it with one atomic store, and free the one it replaced once no reader can hold it.
//
// Why a pin and how an install knows it may free (issue 16: the threshold search installs a version
// per step, and retired versions used to be kept forever): a reader increments a counter cell, then
// loads the pointer; it decrements the cell when done. The install stores the new pointer, then
// waits until every cell has been seen at zero once. A reader that got the old pointer loaded it
// before the store, so it incremented its cell before the store too, and that cell stays above
// zero until it unpins: a cell seen at zero after the store holds no such reader. All of it is
// sequentially consistent, so the order argument holds and TSAN sees the unpin happen before the
// free. The cells are per thread (no cache line shared by every lookup) and in two halves chosen
// by an epoch the install flips before it waits, so new pins go to the half it is not waiting on
// and a steady stream of lookups cannot keep the wait going.
#include "classes.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace geryon {
namespace {

constexpr absl::string_view kMagicPrefix = "geryon.map_table.native ";

int ReadDefaultClassFromEnv() {
  const char* raw = std::getenv("GERYON_DEFAULT_CLASS");
  int value = 0;
  if (raw == nullptr || !absl::SimpleAtoi(raw, &value) || value < 0 || value >= kMaxClasses) return 0;
  return value;
}

MapTableSnapshot* BuiltinTable() {
  auto* table = new MapTableSnapshot();
  table->default_class = ReadDefaultClassFromEnv();
  table->num_classes = std::max(2, table->default_class + 1);
  return table;
}

// The table before any install. Held here for the process and never freed (it is tiny): a static
// pointer keeps it reachable (LeakSanitizer reported it once it was only in retired lists).
const MapTableSnapshot* Builtin() {
  static const MapTableSnapshot* const builtin = BuiltinTable();
  return builtin;
}

std::atomic<const MapTableSnapshot*>& Current() {
  static std::atomic<const MapTableSnapshot*> current{Builtin()};
  return current;
}

std::mutex& WriterMutex() {
  static std::mutex mu;
  return mu;
}

constexpr int kCellsPerHalf = 32;
struct alignas(64) PinCell {  // one cache line each
  std::atomic<int64_t> pins{0};
};
PinCell g_cells[2 * kCellsPerHalf];  // constant-initialized: usable before any static constructor
std::atomic<uint32_t> g_epoch{0};
std::atomic<int64_t> g_live{1};  // the built-in snapshot

// This thread's cell within a half, assigned round robin on its first pin. Threads beyond
// kCellsPerHalf share cells, which only costs sharing a cache line.
int ThreadCell() {
  static std::atomic<uint32_t> next{0};
  thread_local int mine = -1;  // constant-initialized: no guard on the hot path
  if (mine < 0) mine = static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % kCellsPerHalf);
  return mine;
}

// Returns once every pin taken before the caller's store of the current pointer is released. Pins
// are short (no blocking inside), so this is a few microseconds when no pinning thread is descheduled.
void WaitForEarlierPins() {
  for (int round = 0; round < 2; ++round) {
    const uint32_t epoch = g_epoch.fetch_add(1, std::memory_order_seq_cst);  // new pins: other half
    PinCell* half = &g_cells[(epoch & 1) * kCellsPerHalf];
    for (int i = 0; i < kCellsPerHalf; ++i) {
      for (int spins = 0; half[i].pins.load(std::memory_order_seq_cst) != 0; ++spins) {
        if (spins < 64) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
    }
  }
}

// "key value" with an integer value in [lo, hi].
bool ParseHeader(absl::string_view line, absl::string_view key, int64_t lo, int64_t hi, int line_no,
                 int64_t* value, std::string* error) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 2 || parts[0] != key) {
    *error = absl::StrCat("map_table line ", line_no, ": expected '", key, " <integer>', got '", line, "'");
    return false;
  }
  if (!absl::SimpleAtoi(parts[1], value) || *value < lo || *value > hi) {
    *error = absl::StrCat("map_table line ", line_no, ": ", key, " '", parts[1], "' is not an integer in [", lo,
                          ", ", hi, "]");
    return false;
  }
  return true;
}

bool SameTable(const MapTableSnapshot& a, const MapTableSnapshot& b) {
  return a.version == b.version && a.num_classes == b.num_classes && a.default_class == b.default_class &&
         a.class_of_id == b.class_of_id && a.rank_of_id == b.rank_of_id && a.id_of_producer == b.id_of_producer;
}

}  // namespace

std::string AnnotateEdge(absl::string_view tensor_name, int64_t param_id) {
  return absl::StrCat(tensor_name, kParamTag, param_id);
}

int64_t ParamIdForEdge(absl::string_view edge_name) {
  size_t at = edge_name.rfind(kParamTag);
  if (at == absl::string_view::npos) return -1;
  absl::string_view digits = edge_name.substr(at + kParamTag.size());
  if (digits.empty() || digits.size() > 9) return -1;
  int64_t id = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    id = id * 10 + (c - '0');
  }
  return id;
}

absl::string_view EdgeProducer(absl::string_view edge_name) {
  if (!absl::ConsumePrefix(&edge_name, "edge_")) return "";
  size_t digits = 0;
  while (digits < edge_name.size() && edge_name[digits] >= '0' && edge_name[digits] <= '9') ++digits;
  if (digits == 0 || digits >= edge_name.size() || edge_name[digits] != '_') return "";
  return edge_name.substr(digits + 1);
}

namespace {
int64_t ResolveIn(const MapTableSnapshot& table, absl::string_view edge_name) {
  int64_t id = ParamIdForEdge(edge_name);
  if (id >= 0 || table.id_of_producer.empty()) return id;
  auto it = table.id_of_producer.find(EdgeProducer(edge_name));
  return it == table.id_of_producer.end() ? -1 : it->second;
}
}  // namespace

MapTablePin::MapTablePin()
    : cell_((g_epoch.load(std::memory_order_relaxed) & 1) * kCellsPerHalf + ThreadCell()) {
  g_cells[cell_].pins.fetch_add(1, std::memory_order_seq_cst);  // before the load: see the top
  table_ = Current().load(std::memory_order_seq_cst);
}

MapTablePin::~MapTablePin() { g_cells[cell_].pins.fetch_sub(1, std::memory_order_seq_cst); }

int64_t LiveMapTableSnapshots() { return g_live.load(std::memory_order_relaxed); }

int64_t ResolveParamId(absl::string_view edge_name) {
  MapTablePin table;
  return ResolveIn(*table, edge_name);
}

int ClassForEdge(absl::string_view edge_name) {
  MapTablePin table;
  int64_t id = ResolveIn(*table, edge_name);
  if (id < 0 || id >= static_cast<int64_t>(table->class_of_id.size())) return table->default_class;
  return table->class_of_id[id];
}

EdgeInfo LookupEdge(absl::string_view edge_name) {
  MapTablePin table;
  int64_t id = ResolveIn(*table, edge_name);
  if (id < 0 || id >= static_cast<int64_t>(table->class_of_id.size())) {
    return EdgeInfo{table->default_class, kUnranked, id};
  }
  return EdgeInfo{table->class_of_id[id], table->rank_of_id[id], id};
}

int NumClasses() { return MapTablePin()->num_classes; }

int BuiltinDefaultClass() {
  static const int value = ReadDefaultClassFromEnv();
  return value;
}

bool ParseMapTable(absl::string_view text, MapTableSnapshot* out, std::string* error) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  // A trailing newline after "end" is allowed; anything else after it is not.
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  const std::string expected = absl::StrCat(kMagicPrefix, kMapTableFormat);
  if (lines.empty() || lines[0] != expected) {
    // Name the version found, so an old writer (format 1: no ranks) is told apart from garbage.
    absl::string_view first = lines.empty() ? absl::string_view() : lines[0];
    std::string found = "no format version";
    if (absl::StartsWith(first, kMagicPrefix)) {
      found = absl::StrCat("format version '", first.substr(kMagicPrefix.size()), "'");
    } else {
      found = absl::StrCat("'", first.substr(0, 80), "' (", found, ")");
    }
    *error = absl::StrCat("map_table line 1: found ", found, ", expected format version ", kMapTableFormat, " ('",
                          expected, "'; version 1 tables carry no urgency ranks: rewrite them with this ",
                          "release's geryon.tf.map_table_native.to_native)");
    return false;
  }
  size_t next = 1;  // index of the next unread line
  auto line_no = [&next]() { return static_cast<int>(next + 1); };
  auto truncated = [&](absl::string_view expected) {
    *error = absl::StrCat("map_table: truncated after line ", next, ": expected ", expected);
    return false;
  };
  auto header = [&](absl::string_view key, int64_t lo, int64_t hi, int64_t* value) {
    if (next >= lines.size()) return truncated(absl::StrCat("'", key, " <integer>'"));
    bool ok = ParseHeader(lines[next], key, lo, hi, line_no(), value, error);
    ++next;
    return ok;
  };
  MapTableSnapshot table;
  int64_t version, classes, default_class, params;
  if (!header("version", 1, INT64_MAX / 2, &version) || !header("classes", 2, kMaxClasses, &classes) ||
      !header("default", 0, classes - 1, &default_class) || !header("params", 0, kMaxParams, &params)) {
    return false;
  }
  table.version = version;
  table.num_classes = static_cast<int>(classes);
  table.default_class = static_cast<int>(default_class);
  std::vector<bool> seen;
  absl::flat_hash_set<absl::string_view> names;  // views into `text`, which outlives the parse
  names.reserve(params);
  for (int64_t i = 0; i < params; ++i, ++next) {
    if (next >= lines.size()) return truncated(absl::StrCat(params - i, " more parameter lines"));
    absl::string_view line = lines[next];
    // "<id> <class> <rank> <name>": the name is the rest of the line and may hold spaces.
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
    int64_t id, cls, rank;
    if (parts.size() != 4 || parts[3].empty() || !absl::SimpleAtoi(parts[0], &id) || id < 0 || id >= kMaxParams) {
      *error = absl::StrCat("map_table line ", line_no(), ": expected '<id> <class> <rank> <name>' with id in [0, ",
                            kMaxParams, "), got '", line, "'");
      return false;
    }
    if (!absl::SimpleAtoi(parts[2], &rank) || rank < 0 || rank >= kMaxParams) {
      *error = absl::StrCat("map_table line ", line_no(), ": rank '", parts[2], "' of parameter ", id,
                            " is not an integer in [0, ", kMaxParams, ")");
      return false;
    }
    if (!absl::SimpleAtoi(parts[1], &cls) || cls < 0 || cls >= classes) {
      *error = absl::StrCat("map_table line ", line_no(), ": class '", parts[1], "' of parameter ", id,
                            " is not a class in [0, ", classes - 1, "]");
      return false;
    }
    if (id >= static_cast<int64_t>(seen.size())) {
      seen.resize(id + 1, false);
      table.class_of_id.resize(id + 1, static_cast<int8_t>(default_class));
      table.rank_of_id.resize(id + 1, kUnranked);
    }
    if (seen[id]) {
      *error = absl::StrCat("map_table line ", line_no(), ": duplicate parameter id ", id);
      return false;
    }
    seen[id] = true;
    table.class_of_id[id] = static_cast<int8_t>(cls);
    table.rank_of_id[id] = static_cast<int32_t>(rank);
    if (!names.insert(parts[3]).second) {
      *error = absl::StrCat("map_table line ", line_no(), ": duplicate parameter name '", parts[3], "'");
      return false;
    }
  }
  int64_t bindings;
  if (!header("bindings", 0, 4 * kMaxParams, &bindings)) return false;
  for (int64_t i = 0; i < bindings; ++i, ++next) {
    if (next >= lines.size()) return truncated(absl::StrCat(bindings - i, " more binding lines"));
    absl::string_view line = lines[next];
    // "<id> <producer node name>": the name is the rest of the line.
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    int64_t id;
    if (parts.size() != 2 || parts[1].empty() || !absl::SimpleAtoi(parts[0], &id) || id < 0 ||
        id >= static_cast<int64_t>(seen.size()) || !seen[id]) {
      *error = absl::StrCat("map_table line ", line_no(), ": expected '<id> <producer>' with the id of a ",
                            "parameter listed above, got '", line, "'");
      return false;
    }
    if (!table.id_of_producer.emplace(std::string(parts[1]), id).second) {
      *error = absl::StrCat("map_table line ", line_no(), ": producer '", parts[1], "' is bound twice");
      return false;
    }
  }
  if (next >= lines.size()) return truncated("'end'");
  if (lines[next] != "end" || next + 1 != lines.size()) {
    *error = absl::StrCat("map_table line ", line_no(), ": expected 'end' as the last line, got '", lines[next],
                          "'");
    return false;
  }
  *out = std::move(table);
  return true;
}

bool InstallMapTable(absl::string_view text, std::string* error) {
  auto table = std::make_unique<MapTableSnapshot>();
  if (!ParseMapTable(text, table.get(), error)) return false;
  std::lock_guard<std::mutex> lock(WriterMutex());
  const MapTableSnapshot* current = Current().load(std::memory_order_acquire);
  if (table->version == current->version) {
    // Several tasks of one process (tests, in-process clusters) install the same version each.
    if (SameTable(*table, *current)) return true;
    *error = absl::StrCat("map_table version ", table->version,
                          " is already installed with different contents; give the new table a higher version");
    return false;
  }
  if (table->version < current->version) {
    *error = absl::StrCat("map_table version ", table->version, " is older than the installed version ",
                          current->version, "; refusing to go back");
    return false;
  }
  g_live.fetch_add(1, std::memory_order_relaxed);
  Current().store(table.release(), std::memory_order_seq_cst);
  // Under the writer lock, so installs free in order and at most one version waits at a time.
  WaitForEarlierPins();
  if (current != Builtin()) {
    delete current;
    g_live.fetch_sub(1, std::memory_order_relaxed);
  }
  return true;
}

}  // namespace geryon

// For tests and diagnostics (geryon.tf's ctypes handle): snapshots allocated and not yet freed.
extern "C" __attribute__((visibility("default"))) int64_t geryon_map_table_live_snapshots() {
  return geryon::LiveMapTableSnapshots();
}
