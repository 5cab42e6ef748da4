// Custom ops that install a map_table version on the task that runs them and read it back.
//
// Why ops: every task already runs TF ops placed on it (the chief eagerly, workers through
// ClusterCoordinator.schedule, PSes through an op pinned to /job:ps/task:i), so a new table reaches
// each process over TF's own control plane, in order with the steps around it, with no new port,
// protocol or agent in the path. The data plane then picks it up on the next tensor it sends.
#include <string>

#include "classes.h"
#include "fallback.h"
#include "graph_pass.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "transport.h"
#include "tsan.h"

namespace geryon {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::tstring;
namespace errors = ::tensorflow::errors;
namespace shape_inference = ::tensorflow::shape_inference;

REGISTER_OP("GeryonSetMapTable")
    .Input("table: string")
    .Output("version: int64")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Installs a map_table (native text format) in this process; returns the version in force.");

REGISTER_OP("GeryonClassificationReport")
    .Output("report: string")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("This process's classification report as JSON (geryon.tf.classification_report; fallback.h).");

REGISTER_OP("GeryonMapTable")
    .Output("version: int64")
    .Output("num_classes: int32")
    .Output("default_class: int32")
    .Output("classes: int32")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->Scalar());
      c->set_output(3, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("The map_table in force in this process: version, k, default class, class per parameter id.");

REGISTER_OP("GeryonClassForEdge")
    .Input("edge_names: string")
    .Output("classes: int32")
    .Output("param_ids: int64")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      return absl::OkStatus();
    })
    .Doc("The class and parameter id (-1: none) the rendezvous uses for each edge name.");

REGISTER_OP("GeryonAnnotatedEdges")
    .Output("edges: string")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->Matrix(c->UnknownDim(), 5));
      return absl::OkStatus();
    })
    .Doc("What the graph pass annotated in this process: rows of (role, parameter id, old name, new name, sent tensor).");

REGISTER_OP("GeryonRankForEdge")
    .Input("edge_names: string")
    .Output("ranks: int32")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc("The urgency rank the data plane sends with a request for each edge name (-1: unranked).");

class RankForEdgeOp : public OpKernel {
 public:
  explicit RankForEdgeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& names = ctx->input(0);
    Tensor* ranks = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, names.shape(), &ranks));
    auto in = names.flat<tstring>();
    auto out = ranks->flat<int32_t>();
    for (int64_t i = 0; i < in.size(); ++i) {
      const EdgeInfo edge = LookupEdge(absl::string_view(in(i).data(), in(i).size()));
      out(i) = edge.rank == kUnranked ? -1 : edge.rank;
    }
  }
};

// Order inside a class (issue 14), per process, set on every task the way map_tables are.
REGISTER_OP("GeryonSetOrder")
    .Input("order: string")
    .Output("in_force: string")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Sets how this process's data plane orders the responses of a connection: 'urgency' or 'arrival'.");

REGISTER_OP("GeryonSetChunkBytes")
    .Input("chunk_bytes: int64")
    .Output("in_force: int64")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Sets the chunk size (4 KiB to 1 GiB) of responses sent in urgency order in this process.");

REGISTER_OP("GeryonDataPlaneOrder")
    .Output("order: string")
    .Output("chunk_bytes: int64")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->Scalar());
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    })
    .Doc("The order and chunk size in force in this process's data plane.");

REGISTER_OP("GeryonSetSenderOption")
    .Input("option: string")
    .Input("value: string")
    .Output("in_force: string")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Sets a sender option of this process's data plane: sender_order (connection|host), hold (on|off), "
         "hold_gap_us (0..10000), inline (arrival|off|small|drain), notsent_lowat (bytes, 0: the kernel's default). "
         "Returns the value in force.");

REGISTER_OP("GeryonSenderOption")
    .Input("option: string")
    .Output("value: string")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("The value in force of a sender option of this process's data plane (see GeryonSetSenderOption).");

REGISTER_OP("GeryonTakeArrivals")
    .Input("capacity: int64")
    .Output("arrivals: int64")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->Matrix(c->UnknownDim(), 5));
      return absl::OkStatus();
    })
    .Doc("Receives completed in this process since the last call, in completion order: rows of (steady ns, "
         "urgency rank, parameter id, payload bytes, class); then logs up to `capacity` more (0: stop).");

class SetOrderOp : public OpKernel {
 public:
  explicit SetOrderOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES(ctx, ::tensorflow::TensorShapeUtils::IsScalar(input.shape()),
                errors::InvalidArgument("GeryonSetOrder: order must be a scalar string"));
    const tstring& order = input.scalar<tstring>()();
    std::string error;
    OP_REQUIRES(ctx, SetResponseOrder(absl::string_view(order.data(), order.size()), &error),
                errors::InvalidArgument("GeryonSetOrder: ", error));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tstring>()() = ResponseOrderName(CurrentResponseOrder());
  }
};

class SetChunkBytesOp : public OpKernel {
 public:
  explicit SetChunkBytesOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES(ctx, ::tensorflow::TensorShapeUtils::IsScalar(input.shape()),
                errors::InvalidArgument("GeryonSetChunkBytes: chunk_bytes must be a scalar int64"));
    std::string error;
    OP_REQUIRES(ctx, SetChunkBytes(input.scalar<int64_t>()(), &error),
                errors::InvalidArgument("GeryonSetChunkBytes: ", error));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = ChunkBytes();
  }
};

class SetSenderOptionOp : public OpKernel {
 public:
  explicit SetSenderOptionOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& name = ctx->input(0);
    const Tensor& value = ctx->input(1);
    OP_REQUIRES(ctx,
                ::tensorflow::TensorShapeUtils::IsScalar(name.shape()) &&
                    ::tensorflow::TensorShapeUtils::IsScalar(value.shape()),
                errors::InvalidArgument("GeryonSetSenderOption: option and value must be scalar strings"));
    const tstring& n = name.scalar<tstring>()();
    const tstring& v = value.scalar<tstring>()();
    const absl::string_view option(n.data(), n.size());
    std::string error;
    OP_REQUIRES(ctx, SetSenderOption(option, absl::string_view(v.data(), v.size()), &error),
                errors::InvalidArgument("GeryonSetSenderOption: ", error));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tstring>()() = SenderOption(option);
  }
};

class SenderOptionOp : public OpKernel {
 public:
  explicit SenderOptionOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& name = ctx->input(0);
    OP_REQUIRES(ctx, ::tensorflow::TensorShapeUtils::IsScalar(name.shape()),
                errors::InvalidArgument("GeryonSenderOption: option must be a scalar string"));
    const tstring& n = name.scalar<tstring>()();
    const std::string value = SenderOption(absl::string_view(n.data(), n.size()));
    OP_REQUIRES(ctx, !value.empty(),
                errors::InvalidArgument("GeryonSenderOption: sender option: '", n,
                                        "' is not one of 'sender_order', 'hold', 'hold_gap_us', 'inline', 'notsent_lowat'"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tstring>()() = value;
  }
};

class DataPlaneOrderOp : public OpKernel {
 public:
  explicit DataPlaneOrderOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tstring>()() = ResponseOrderName(CurrentResponseOrder());
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &out));
    out->scalar<int64_t>()() = ChunkBytes();
  }
};

class TakeArrivalsOp : public OpKernel {
 public:
  explicit TakeArrivalsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES(ctx, ::tensorflow::TensorShapeUtils::IsScalar(input.shape()),
                errors::InvalidArgument("GeryonTakeArrivals: capacity must be a scalar int64"));
    std::vector<ArrivalRecord> arrivals = TakeArrivals(input.scalar<int64_t>()());
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(arrivals.size()), 5}), &out));
    auto m = out->matrix<int64_t>();
    for (size_t i = 0; i < arrivals.size(); ++i) {
      m(i, 0) = arrivals[i].t_ns;
      m(i, 1) = arrivals[i].rank;
      m(i, 2) = arrivals[i].param_id;
      m(i, 3) = static_cast<int64_t>(arrivals[i].bytes);
      m(i, 4) = arrivals[i].cls;
    }
  }
};

class SetMapTableOp : public OpKernel {
 public:
  explicit SetMapTableOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    // The input was built on another thread (Python's, or another kernel's) and handed over under
    // TF's own locks, which ThreadSanitizer cannot see (tsan.h): its shape and bytes are copied out
    // unrecorded, and only the copy is parsed. A copy costs a few ms for a million parameters.
    bool scalar = false;
    std::string text, shape;
    GERYON_IGNORE_ACCESSES_BEGIN();
    scalar = TensorShapeUtils::IsScalar(input.shape());
    if (scalar) {
      text.assign(input.scalar<tstring>()().data(), input.scalar<tstring>()().size());
    } else {
      shape = input.shape().DebugString();
    }
    GERYON_IGNORE_ACCESSES_END();
    OP_REQUIRES(ctx, scalar,
                errors::InvalidArgument("GeryonSetMapTable: table must be a scalar string, got shape ", shape));
    std::string error;
    OP_REQUIRES(ctx, InstallMapTable(text, &error), errors::InvalidArgument("GeryonSetMapTable: ", error));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = MapTablePin()->version;
  }

 private:
  using TensorShapeUtils = ::tensorflow::TensorShapeUtils;
};

class MapTableOp : public OpKernel {
 public:
  explicit MapTableOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    // Pinned for the copy out: a concurrent install waits for it before freeing this version.
    const MapTablePin table;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = table->version;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &out));
    out->scalar<int32_t>()() = table->num_classes;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({}), &out));
    out->scalar<int32_t>()() = table->default_class;
    const int64_t n = static_cast<int64_t>(table->class_of_id.size());
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({n}), &out));
    auto classes = out->vec<int32_t>();
    for (int64_t i = 0; i < n; ++i) classes(i) = table->class_of_id[i];
  }
};

// An op so that a remote task's report comes back over TF's control plane, like the map_table's.
class ClassificationReportOp : public OpKernel {
 public:
  explicit ClassificationReportOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tstring>()() = ClassificationReportJson();
  }
};

class ClassForEdgeOp : public OpKernel {
 public:
  explicit ClassForEdgeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& names = ctx->input(0);
    Tensor* classes = nullptr;
    Tensor* ids = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, names.shape(), &classes));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, names.shape(), &ids));
    auto in = names.flat<tstring>();
    auto out_classes = classes->flat<int32_t>();
    auto out_ids = ids->flat<int64_t>();
    for (int64_t i = 0; i < in.size(); ++i) {
      absl::string_view name(in(i).data(), in(i).size());
      out_classes(i) = ClassForEdge(name);
      out_ids(i) = ResolveParamId(name);
    }
  }
};

class AnnotatedEdgesOp : public OpKernel {
 public:
  explicit AnnotatedEdgesOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    std::vector<EdgeAnnotation> edges = AnnotatedEdges();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(edges.size()), 5}), &out));
    auto m = out->matrix<tstring>();
    for (size_t i = 0; i < edges.size(); ++i) {
      m(i, 0) = edges[i].role;
      m(i, 1) = std::to_string(edges[i].param_id);
      m(i, 2) = edges[i].old_name;
      m(i, 3) = edges[i].new_name;
      m(i, 4) = edges[i].source;
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("GeryonSetMapTable").Device(DEVICE_CPU), SetMapTableOp);
REGISTER_KERNEL_BUILDER(Name("GeryonMapTable").Device(DEVICE_CPU), MapTableOp);
REGISTER_KERNEL_BUILDER(Name("GeryonClassificationReport").Device(DEVICE_CPU), ClassificationReportOp);
REGISTER_KERNEL_BUILDER(Name("GeryonClassForEdge").Device(DEVICE_CPU), ClassForEdgeOp);
REGISTER_KERNEL_BUILDER(Name("GeryonAnnotatedEdges").Device(DEVICE_CPU), AnnotatedEdgesOp);
REGISTER_KERNEL_BUILDER(Name("GeryonRankForEdge").Device(DEVICE_CPU), RankForEdgeOp);
REGISTER_KERNEL_BUILDER(Name("GeryonSetOrder").Device(DEVICE_CPU), SetOrderOp);
REGISTER_KERNEL_BUILDER(Name("GeryonSetChunkBytes").Device(DEVICE_CPU), SetChunkBytesOp);
REGISTER_KERNEL_BUILDER(Name("GeryonDataPlaneOrder").Device(DEVICE_CPU), DataPlaneOrderOp);
REGISTER_KERNEL_BUILDER(Name("GeryonTakeArrivals").Device(DEVICE_CPU), TakeArrivalsOp);
REGISTER_KERNEL_BUILDER(Name("GeryonSetSenderOption").Device(DEVICE_CPU), SetSenderOptionOp);
REGISTER_KERNEL_BUILDER(Name("GeryonSenderOption").Device(DEVICE_CPU), SenderOptionOp);

}  // namespace
}  // namespace geryon
