// A POST_PARTITIONING graph pass that names the parameter each cross-task Send/Recv pair carries.
//
// At this point a TF2 multi-device function has been split into one graph per device, and both ends
// of every Send/Recv pair are in the partitions this pass sees. (TF1 sessions run the pass once per
// partition, in the process that runs it: one end only, so their pairs are left alone and resolve
// through the map_table's producer bindings instead, see classes.h and geryon/tf/tf1.py.)
// For each pair it finds the variable behind the tensor:
//   pull: _Send <- (fwd)* <- ReadVariableOp/ResourceGather <- (fwd)* <- variable
//   push: _Recv -> (ops, e.g. lr * g; optimizer slots) -> AssignSubVariableOp/ResourceApply* (variable)
// where (fwd)* are ops that hand a tensor on unchanged: Identity, IdentityN, and the Enter/Merge/Switch/
// Exit/NextIteration that a While or If inside the step (Keras' steps_per_execution loop, a tf.range
// loop, tf.cond) is lowered to before partitioning, so pairs inside loops resolve as outside them;
// where "variable" is a TF2 function's resource _Arg that carries the parameter id in the attr
// "_geryon_param_id" (set at tracing time by geryon/tf/bindings.py). The pair's
// `tensor_name` becomes "<name>#gp=<id>" on both ends, so the rendezvous key itself carries the id
// and the class is looked up per tensor at run time: new thresholds need no re-tracing.
// Set GERYON_GRAPH_PASS_DUMP=<dir> to write what the pass saw and did (see GRAPH_PASS.md).
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "classes.h"
#include "graph_pass.h"
#include "tensorflow/core/common_runtime/optimization_registry.h"
#include "tensorflow/core/graph/graph.h"

namespace geryon {
namespace {

using ::tensorflow::DT_RESOURCE;
using ::tensorflow::Edge;
using ::tensorflow::GraphOptimizationPass;
using ::tensorflow::GraphOptimizationPassOptions;
using ::tensorflow::Node;
using ::tensorflow::OptimizationPassRegistry;

// Ops the push search walks from a _Recv before giving up: lr * g, casts, loss scaling, and
// through optimizer slots (Adam: g -> m update -> m read -> m / sqrt(v) -> parameter update).
constexpr int kMaxPushHops = 12;
// The annotation log is for tests and diagnostics; cap it so a long job cannot grow it forever.
constexpr size_t kMaxLogged = 100000;

std::mutex& LogMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<EdgeAnnotation>& Log() {
  static auto* log = new std::vector<EdgeAnnotation>();
  return *log;
}

bool IsRead(const Node* n) {
  const std::string& op = n->type_string();
  return op == "ReadVariableOp" || op == "ResourceGather" || op == "ResourceGatherNd";
}

// Ops that write a gradient (or a value computed from it) into the variable given as input 0.
bool IsUpdate(const Node* n) {
  const std::string& op = n->type_string();
  return op == "AssignSubVariableOp" || op == "AssignAddVariableOp" || op == "AssignVariableOp" ||
         absl::StartsWith(op, "ResourceApply") ||
         absl::StartsWith(op, "ResourceSparseApply") || absl::StartsWith(op, "ResourceScatter");
}

// Ops that hand a tensor on unchanged, so the variable (or the read) behind it is the one behind their
// input: Identity (also what the arguments of an inlined function call become), IdentityN (output k is
// input k), and the control-flow primitives a While/If/Case is lowered to before partitioning (Enter,
// Merge, Switch, Exit, NextIteration). TF 2.21 lowers a loop-invariant resource of a While (a captured
// variable) to `_Arg -> Enter -> Identity -> ReadVariableOp` inside the loop's frame (GRAPH_PASS.md).
bool Forwards(const Node* n) {
  return n->IsIdentity() || n->IsEnter() || n->IsMerge() || n->IsSwitch() || n->IsExit() ||
         n->IsNextIteration() || n->type_string() == "IdentityN";
}

// The node a tensor (output `output` of `n`) originates from, through forwarding ops: the _Arg or
// variable op behind a resource, the read behind a value. Null when the walk forks to different
// origins (a Merge of two variables) or exceeds `budget` nodes. A loop's back edge (Merge <-
// NextIteration <- ... <- Merge) meets a node already on the walk and adds nothing.
void CollectOrigins(const Node* n, int output, std::set<std::pair<const Node*, int>>& seen,
                    std::set<const Node*>& origins, int& budget) {
  if (n == nullptr || --budget < 0) {
    origins.insert(nullptr);
    return;
  }
  if (!seen.insert({n, output}).second) return;
  if (!Forwards(n)) {
    origins.insert(n);
    return;
  }
  if (n->IsMerge()) {
    for (const Edge* e : n->in_edges()) {
      if (!e->IsControlEdge()) CollectOrigins(e->src(), e->src_output(), seen, origins, budget);
    }
    return;
  }
  const Edge* in = nullptr;
  const int index = n->type_string() == "IdentityN" ? output : 0;
  if (!n->input_edge(index, &in).ok() || in == nullptr) {
    origins.insert(nullptr);
    return;
  }
  CollectOrigins(in->src(), in->src_output(), seen, origins, budget);
}

constexpr int kMaxForwardNodes = 64;

const Node* Origin(const Node* n, int output) {
  std::set<std::pair<const Node*, int>> seen;
  std::set<const Node*> origins;
  int budget = kMaxForwardNodes;
  CollectOrigins(n, output, seen, origins, budget);
  return origins.size() == 1 ? *origins.begin() : nullptr;
}

// The origin of data input `index` of `n`.
const Node* InputOrigin(const Node* n, int index) {
  const Edge* e = nullptr;
  if (n == nullptr || !n->input_edge(index, &e).ok() || e == nullptr) return nullptr;
  return Origin(e->src(), e->src_output());
}

// The parameter id of a resource origin (see Origin), or -1 when it is not a variable we know.
int64_t VariableId(const Node* n) {
  // geryon.tf.bindings sets this on the placeholder that captures the variable; TF copies
  // underscore attrs of a function's placeholders onto its _Arg nodes in every partition.
  int64_t id = -1;
  if (n == nullptr || !n->IsArg() || n->output_type(0) != DT_RESOURCE ||
      !tensorflow::TryGetNodeAttr(n->attrs(), kParamIdAttr, &id)) {
    return -1;
  }
  return id;
}

// The read op a _Send sends (through forwarding ops), or null when it sends something else.
const Node* SentRead(const Node* send) {
  const Node* n = InputOrigin(send, 0);
  return n != nullptr && IsRead(n) ? n : nullptr;
}

int64_t PullId(const Node* send) {
  const Node* read = SentRead(send);
  return read == nullptr ? -1 : VariableId(InputOrigin(read, 0));
}

// Every read of each variable in the partitions, by the variable's origin: a slot's reads inside a
// loop hang off the loop's Enter/Identity, not off the slot's _Arg itself.
using ReadsByVariable = std::map<const Node*, std::vector<const Node*>>;

// The one parameter the received tensor updates, or -1 when there is none or more than one.
// The search follows the data the gradient flows into on the PS. When it reaches an update of a
// variable that is not a parameter (an optimizer slot: momentum, Adam's m and v), it goes on from
// that variable's reads, since the slot then flows into the parameter's own update.
int64_t PushId(const Node* recv, const ReadsByVariable& reads) {
  std::set<int64_t> ids;
  std::vector<std::pair<const Node*, int>> frontier{{recv, 0}};
  std::set<const Node*> visited{recv};
  while (!frontier.empty()) {
    auto [n, depth] = frontier.back();
    frontier.pop_back();
    if (depth >= kMaxPushHops) continue;
    for (const Edge* e : n->out_edges()) {
      if (e->IsControlEdge()) continue;
      const Node* dst = e->dst();
      if (dst->IsSend() || dst->IsRetval() || !visited.insert(dst).second) continue;
      if (!IsUpdate(dst) || e->dst_input() == 0) {
        // Forwarding ops (a loop's Enter/Exit, an inlined call's Identity) cost no hop.
        frontier.push_back({dst, Forwards(dst) ? depth : depth + 1});
        continue;
      }
      const Node* variable = InputOrigin(dst, 0);
      int64_t id = VariableId(variable);
      if (id >= 0) {
        ids.insert(id);
        continue;
      }
      if (variable == nullptr) continue;
      auto slot_reads = reads.find(variable);  // a slot: continue from its reads
      if (slot_reads == reads.end()) continue;
      for (const Node* read : slot_reads->second) {
        if (visited.insert(read).second) frontier.push_back({read, depth + 1});
      }
    }
  }
  return ids.size() == 1 ? *ids.begin() : -1;
}

class GeryonAnnotatePass : public GraphOptimizationPass {
 public:
  absl::Status Run(const GraphOptimizationPassOptions& options) override {
    if (options.partition_graphs == nullptr) return absl::OkStatus();
    const int64_t table_version = MapTablePin()->version;  // for the dump; nothing else reads the table
    const std::string& what = options.debug_filename_prefix;  // the function's name, for the dump

    std::map<std::string, const Node*> sends;  // tensor_name -> its _Send
    std::set<std::string> recvs;
    std::vector<Node*> endpoints;
    ReadsByVariable reads;
    for (auto& [device, graph] : *options.partition_graphs) {
      for (Node* n : graph->op_nodes()) {
        if (IsRead(n)) {
          if (const Node* variable = InputOrigin(n, 0)) reads[variable].push_back(n);
          continue;
        }
        if (!n->IsSend() && !n->IsRecv()) continue;
        std::string tensor_name;
        if (!tensorflow::TryGetNodeAttr(n->attrs(), "tensor_name", &tensor_name)) continue;
        if (ParamIdForEdge(tensor_name) >= 0) continue;  // already annotated (pass ran twice)
        endpoints.push_back(n);
        if (n->IsSend()) {
          sends[tensor_name] = n;
        } else {
          recvs.insert(tensor_name);
        }
      }
    }
    // tensor_name -> (role, id) for every pair that carries a parameter.
    std::map<std::string, std::pair<std::string, int64_t>> resolved;
    for (const Node* n : endpoints) {
      std::string tensor_name;
      if (!tensorflow::TryGetNodeAttr(n->attrs(), "tensor_name", &tensor_name)) continue;
      // Rename a pair only when this invocation holds both ends: a TF1 worker or PS sees just its
      // own partition, and renaming one end alone would leave the other waiting forever.
      if (sends.count(tensor_name) == 0 || recvs.count(tensor_name) == 0) continue;
      if (n->IsSend()) {
        int64_t id = PullId(n);
        if (id >= 0) resolved[tensor_name] = {"pull", id};
        continue;
      }
      // A variable read sent between PSes (e.g. the learning rate, feeding another PS's update) is
      // a pull of that variable, never a push of the parameter it helps update.
      auto send = sends.find(tensor_name);
      if (send != sends.end() && SentRead(send->second) != nullptr) continue;
      int64_t id = PushId(n, reads);
      if (id >= 0) resolved[tensor_name] = {"push", id};
    }
    std::vector<EdgeAnnotation> made;
    for (Node* n : endpoints) {
      std::string tensor_name;
      if (!tensorflow::TryGetNodeAttr(n->attrs(), "tensor_name", &tensor_name)) continue;
      auto it = resolved.find(tensor_name);
      if (it == resolved.end()) continue;
      std::string annotated = AnnotateEdge(tensor_name, it->second.second);
      n->ClearAttr("tensor_name");
      n->AddAttr("tensor_name", annotated);
      if (n->IsSend()) {
        const Edge* in = nullptr;
        std::string source = n->input_edge(0, &in).ok() && in != nullptr
                                 ? absl::StrCat(in->src()->name(), ":", in->src_output())
                                 : "";
        made.push_back({it->second.first, it->second.second, tensor_name, annotated, source});
      }
    }
    if (!made.empty()) {
      std::lock_guard<std::mutex> lock(LogMutex());
      for (const auto& a : made) {
        if (Log().size() < kMaxLogged) Log().push_back(a);
      }
    }
    Dump(options, what, table_version, made);
    return absl::OkStatus();
  }

 private:
  static void Dump(const GraphOptimizationPassOptions& options, const std::string& what,
                   int64_t table_version, const std::vector<EdgeAnnotation>& made) {
    const char* dir = std::getenv("GERYON_GRAPH_PASS_DUMP");
    if (dir == nullptr || *dir == '\0') return;
    static std::atomic<int> counter{0};
    std::ofstream out(absl::StrCat(dir, "/geryon_pass_", counter++, ".txt"));
    out << "graph=" << what << " map_table_version=" << table_version << "\n";
    for (const auto& a : made) out << "annotated " << a.role << " " << a.param_id << " " << a.new_name << "\n";
    for (auto& [device, graph] : *options.partition_graphs) {
      out << "=== partition " << device << "\n";
      for (const Node* n : graph->op_nodes()) out << n->def().ShortDebugString() << "\n";
    }
  }
};

REGISTER_OPTIMIZATION(OptimizationPassRegistry::POST_PARTITIONING, 50, GeryonAnnotatePass);

}  // namespace

std::vector<EdgeAnnotation> AnnotatedEdges() {
  std::lock_guard<std::mutex> lock(LogMutex());
  return Log();
}

}  // namespace geryon
