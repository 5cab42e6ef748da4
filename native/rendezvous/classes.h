// The native map_table: parameter id -> (priority class, urgency rank), read on the hot path
// without locks. The rank is the parameter's position in the forward pass's consumption order
// (0 = needed first); the data plane serves the pending responses of one connection by it.
//
// Python (geryon/tf/map_table_native.py) writes the table as text; InstallMapTable parses and
// validates it and swaps it in atomically. The graph pass (graph_pass.cc) annotates the Send/Recv
// pairs that carry a parameter by appending "#gp=<id>" to their `tensor_name`, so the id travels in
// the rendezvous key's edge field and ClassForEdge needs no graph knowledge at run time.
#ifndef GERYON_NATIVE_RENDEZVOUS_CLASSES_H_
#define GERYON_NATIVE_RENDEZVOUS_CLASSES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace geryon {

// Class (0 = most urgent) for the tensor a rendezvous key carries, given the key's edge name
// (the 4th ';'-separated field of the key, e.g. "edge_16_dense/Cast/ReadVariableOp" or an annotated
// name). Lock-free on the hot path; the default class for tensors that carry no parameter.
int ClassForEdge(absl::string_view edge_name);
int NumClasses();  // k, from the current map_table (2 before any table is loaded)

// Rank of tensors that carry no parameter (or one the table does not list): after every ranked
// tensor, in arrival order among themselves (see README.md, "Order inside a class").
inline constexpr int32_t kUnranked = INT32_MAX;

// Class, urgency rank and parameter id (-1: none) of an edge, from one snapshot of the table.
struct EdgeInfo {
  int cls;
  int32_t rank;
  int64_t param_id;
};
EdgeInfo LookupEdge(absl::string_view edge_name);

// The parameter id an annotated edge name carries, or -1 when it carries none.
int64_t ParamIdForEdge(absl::string_view edge_name);

// The parameter id of an edge under the current table: its annotation, else (TF1 graphs, which
// the pass cannot annotate) the table's binding of the edge's producer, else -1.
int64_t ResolveParamId(absl::string_view edge_name);

// The producer node of a partitioner-made edge name "edge_<n>_<producer>", or "" for other names.
absl::string_view EdgeProducer(absl::string_view edge_name);

// The annotation the graph pass appends to a Send/Recv `tensor_name`. ';' is the rendezvous key's
// field separator and ':' separates its frame/iter field, so the suffix uses neither.
inline constexpr absl::string_view kParamTag = "#gp=";
std::string AnnotateEdge(absl::string_view tensor_name, int64_t param_id);

// Limits that keep a hostile or broken table from exhausting memory.
inline constexpr int kMaxClasses = 8;
inline constexpr int64_t kMaxParams = 1 << 24;

// One immutable map_table version.
struct MapTableSnapshot {
  int64_t version = 0;  // 0: the built-in table before any install
  int num_classes = 2;
  int default_class = 0;
  std::vector<int8_t> class_of_id;  // index: parameter id; ids past the end take default_class
  std::vector<int32_t> rank_of_id;  // index: parameter id; kUnranked for ids the table does not list
  // TF1 sessions: producer node name -> parameter id, for edges the pass could not annotate
  // (each process sees one end of the pair there). Python derives it from the client graph.
  absl::flat_hash_map<std::string, int64_t> id_of_producer;
  // Names are checked (non-empty, unique) at parse but not kept: a version costs five bytes per
  // parameter (class and rank) and its TF1 bindings.
};


// The format version ParseMapTable reads: "geryon.map_table.native 2" (version 1 had no ranks and
// is refused with a message naming both versions).
inline constexpr int kMapTableFormat = 2;

// Parses `text` (format "geryon.map_table.native 2", see map_table_native.py). On error returns
// false and sets `*error` to a message naming the line and field; `*out` is left untouched.
bool ParseMapTable(absl::string_view text, MapTableSnapshot* out, std::string* error);

// Parses and installs a table. A malformed table, or one whose version is not above the current
// one, is refused with `*error` set, and the current table stays.
bool InstallMapTable(absl::string_view text, std::string* error);

// The table in force when the pin was made, kept alive until the pin is destroyed: an install
// frees the version it replaces only after every pin taken before its swap is gone (classes.cc).
// Pins are for short, non-blocking reads (one lookup, one op's Compute, one graph pass): an
// install waits for them, and a pin must never be held across an install on the same thread.
class MapTablePin {
 public:
  MapTablePin();
  ~MapTablePin();
  MapTablePin(const MapTablePin&) = delete;
  MapTablePin& operator=(const MapTablePin&) = delete;
  const MapTableSnapshot& operator*() const { return *table_; }
  const MapTableSnapshot* operator->() const { return table_; }

 private:
  int cell_;
  const MapTableSnapshot* table_;
};

// Snapshots allocated and not yet freed (the built-in one included): 1 or 2 at rest, a few more
// while installs overlap pins. For tests (geryon_map_table_live_snapshots) and diagnostics.
int64_t LiveMapTableSnapshots();

// The class used when no table is installed yet: for tensors that carry no parameter and, before
// the first install, for every tensor. Configurable from the environment GERYON_DEFAULT_CLASS.
int BuiltinDefaultClass();

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_CLASSES_H_
