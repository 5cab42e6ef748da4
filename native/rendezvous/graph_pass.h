// What the Send/Recv annotation pass (graph_pass.cc) did in this process, for tests and diagnostics.
#ifndef GERYON_NATIVE_RENDEZVOUS_GRAPH_PASS_H_
#define GERYON_NATIVE_RENDEZVOUS_GRAPH_PASS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace geryon {

// The attr on a function's resource _Arg that names the parameter the captured variable is.
inline constexpr char kParamIdAttr[] = "_geryon_param_id";

struct EdgeAnnotation {
  std::string role;  // "pull" (a read of the variable, PS -> worker) or "push" (its gradient, worker -> PS)
  int64_t param_id;
  std::string old_name;  // the Send/Recv `tensor_name` before the pass
  std::string new_name;  // after: old_name + "#gp=<id>"
  std::string source;    // the tensor the _Send sends, "<node>:<output>"
};

// Every annotation made so far in this process, oldest first (bounded; see graph_pass.cc).
std::vector<EdgeAnnotation> AnnotatedEdges();

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_GRAPH_PASS_H_
