// The `grpc+geryon` server protocol: TensorFlow's GrpcServer for the control plane, with a
// rendezvous manager whose cross-task receives travel on Geryon's data plane (transport.h), on the
// flow of the class that ClassForEdge gives the tensor's edge.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/device.h"
#include "tensorflow/core/common_runtime/device_mgr.h"
#include "absl/strings/cord.h"
#include "tensorflow/core/distributed_runtime/base_rendezvous_mgr.h"
#include "tensorflow/core/distributed_runtime/error_payloads.h"
#include "tensorflow/core/distributed_runtime/master_env.h"
#include "tensorflow/core/distributed_runtime/worker_cache.h"
#include "tensorflow/core/distributed_runtime/worker_cache_wrapper.h"
#include "tensorflow/core/distributed_runtime/rpc/grpc_server_lib.h"
#include "tensorflow/core/distributed_runtime/server_lib.h"
#include "tensorflow/core/distributed_runtime/worker_env.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/types.h"
#include "fallback.h"
#include "open_flows.h"
#include "staging.h"
#include "transport.h"
#include "tsan.h"

#ifndef GERYON_TF_VERSION
#error "GERYON_TF_VERSION (the TensorFlow release built against) is set by geryon/tf/build.py"
#endif

#include "classes.h"

namespace geryon {
namespace {

using tensorflow::BaseRecvTensorCall;
using tensorflow::BaseRemoteRendezvous;
using tensorflow::Device;
using tensorflow::DeviceContext;
using tensorflow::DeviceNameUtils;
using tensorflow::Rendezvous;
using tensorflow::Tensor;
using tensorflow::WorkerEnv;

constexpr char kProtocol[] = "grpc+geryon";
constexpr int kDefaultPortOffset = 1000;

int ClampClass(int cls) {
  if (cls < 0) return 0;
  return cls >= kMaxClasses ? kMaxClasses - 1 : cls;
}

bool IsAcceleratorTensor(Device* device, const tensorflow::AllocatorAttributes& attrs) {
  return device->tensorflow_accelerator_device_info() != nullptr && !attrs.on_host();
}

// The context that copies between host and `device` for a Send/Recv: the op's own (what the
// executor gave the kernel, so the copy is ordered on the op's streams), else the device's default.
DeviceContext* CopyContext(Device* device, DeviceContext* op_context) {
  if (op_context != nullptr) return op_context;
  const auto* info = device->tensorflow_accelerator_device_info();
  return info != nullptr ? info->default_context : nullptr;
}

absl::Status NoDeviceContext(const std::string& device, absl::string_view key) {
  return absl::FailedPreconditionError(absl::StrCat("Geryon data plane: ", device,
                                                    " has no device context to copy tensor ", key,
                                                    " between host and device memory"));
}

// A failed host<->device copy keeps its code (a DataLoss stays DataLoss) and names device and key.
absl::Status CopyFailed(const absl::Status& s, const char* what, const std::string& device, absl::string_view key) {
  CountStaging(StagingEvent::kCopyFailure);
  return absl::Status(s.code(), absl::StrCat("Geryon data plane: copying tensor ", key, " ", what, " ", device,
                                             " failed: ", s.message()));
}

// The tensor's bytes where they are one flat buffer (not strings, variants or resources, whose
// tensor_data() is a CHECK failure): what the transport reads into from a socket and writes from,
// and the address their handoff between our reader and our writer is annotated on (tsan.h).
absl::string_view FlatBytes(const Tensor& t) {
  return t.IsInitialized() && tensorflow::DataTypeCanUseMemcpy(t.dtype()) ? t.tensor_data() : absl::string_view();
}

// One receive in flight; registered with the rendezvous so StartAbort and cancellation reach it.
class GeryonRecvCall : public BaseRecvTensorCall {
 public:
  // Announced: TF may call StartAbort from another thread as soon as RegisterCall has the call,
  // ordered only by TF's own lock on its call table (BaseRemoteRendezvous::RegisterCall).
  explicit GeryonRecvCall(tensorflow::thread::ThreadPool* pool) : pool_(pool) { GERYON_HAPPENS_BEFORE(this); }

  void Start(std::function<void()>) override {}  // started by the transport, see RecvFromRemoteAsync

  void StartAbort(const absl::Status& s) override {
    GERYON_HAPPENS_AFTER(this);
    std::shared_ptr<RecvHandle> handle;
    {
      MutexLock l(mu_);
      status_.Update(s);
      handle = handle_;
    }
    // Called with the rendezvous' call lock held: finish the receive on another thread, since its
    // completion deregisters the call under that same lock.
    if (handle) pool_->Schedule(Announced([handle, s] { handle->Abort(s); }));  // TF's pool: tsan.h
  }

  absl::Status status() const override {
    MutexLock l(mu_);
    return status_;
  }

  // Stores the transport's handle; aborts it at once if the call was aborted before it existed.
  void SetHandle(std::shared_ptr<RecvHandle> handle) {
    absl::Status s;
    {
      MutexLock l(mu_);
      handle_ = handle;
      s = status_;
    }
    if (!s.ok()) handle->Abort(s);
  }

 private:
  tensorflow::thread::ThreadPool* const pool_;
  mutable Mutex mu_;  // ours, not tensorflow::mutex: ThreadSanitizer sees it (tsan.h)
  absl::Status status_ TF_GUARDED_BY(mu_);
  std::shared_ptr<RecvHandle> handle_ TF_GUARDED_BY(mu_);
};

class GeryonRemoteRendezvous : public BaseRemoteRendezvous {
 public:
  // Announced on construction and claimed by every method TF calls and by the destructor: TF hands
  // the rendezvous between its threads through its manager's table and refcount, which TSAN cannot
  // see (tsan.h).
  GeryonRemoteRendezvous(const WorkerEnv* env, int64_t step_id, Transport* transport)
      : BaseRemoteRendezvous(env, step_id), transport_(transport) {
    GERYON_HAPPENS_BEFORE(this);
  }

 protected:
  void RecvFromRemoteAsync(const Rendezvous::ParsedKey& tf_parsed, const Rendezvous::Args& recv_args,
                           DoneCallback done) override {
    ScopedHandoff handoff(this);
    // TF's key: usually the RecvOp's own member, built with the kernel on another thread and handed
    // over by TF's executor (invisible to TSAN: a read of it raced the kernel factory's operator new
    // in one triage run). Copied once without recording the reads (tsan.h); only the copy is used.
    // Only the thread-sanitizer variant copies: elsewhere the copy would buy nothing per receive.
#if defined(GERYON_TSAN)
    Rendezvous::ParsedKey parsed;
    GERYON_IGNORE_ACCESSES_BEGIN();
    parsed = tf_parsed;
    GERYON_IGNORE_ACCESSES_END();
#else
    const Rendezvous::ParsedKey& parsed = tf_parsed;
#endif
    std::string src_task, src_device;
    if (!DeviceNameUtils::SplitDeviceName(parsed.src_device, &src_task, &src_device)) {
      done(absl::InternalError(absl::StrCat(parsed.src_device, " is an invalid remote source device")), Args(),
           recv_args, Tensor(), false);
      return;
    }
    Device* dst_device = nullptr;
    absl::Status s = session()->device_mgr()->LookupDevice(parsed.dst_device, &dst_device);
    // Into device memory: the socket is read into a pooled host staging tensor, which the device
    // context then copies to the device (as TF's RPC rendezvous does for GPUs). Host tensors are
    // read straight into their own buffer.
    const bool to_device = s.ok() && IsAcceleratorTensor(dst_device, recv_args.alloc_attrs);
    DeviceContext* copy_context = nullptr;
    tensorflow::Allocator* allocator = nullptr;
    if (to_device) {
      copy_context = CopyContext(dst_device, recv_args.device_context);
      if (copy_context == nullptr) s = NoDeviceContext(dst_device->name(), parsed.FullKey());
      if (s.ok()) s = StagingAllocatorFor(dst_device, &allocator);
    } else if (s.ok()) {
      allocator = dst_device->GetAllocator(recv_args.alloc_attrs);
    }
    if (!s.ok()) {
      done(s, Args(), recv_args, Tensor(), false);
      return;
    }
    const int cls = ClampClass(ClassForEdge(parsed.edge_name));

    auto call = std::make_shared<GeryonRecvCall>(env_->compute_pool);
    RegisterCall(call.get(), recv_args);
    if (!call->status().ok()) {
      DeregisterCall(call.get(), recv_args);
      done(call->status(), Args(), recv_args, Tensor(), false);
      return;
    }
    Ref();
    // Ends the receive: deregisters the call (it stays registered through a device copy, so an
    // abort during the copy still wins) and hands TF the tensor.
    auto complete = std::make_shared<DoneCallback>(
        [this, call, recv_args, done = std::move(done)](const absl::Status& status, const Args&, const Args&,
                                                        const Tensor& tensor, bool is_dead) {
          DeregisterCall(call.get(), recv_args);
          absl::Status s = call->status();  // an abort wins over whatever arrived
          if (s.ok()) s = status;  // a producer's error keeps its payloads (error_frame.h)
          done(s, Args(), recv_args, s.ok() ? tensor : Tensor(), s.ok() && is_dead);
          // The last Unref may be TF's, on another thread, and its decrement is invisible to TSAN:
          // announce all that came before ours, and leave our decrement itself unrecorded (else
          // it races with the delete that follows TF's; tsan.h).
          GERYON_HAPPENS_BEFORE(this);
          GERYON_IGNORE_ACCESSES_BEGIN();
          Unref();
          GERYON_IGNORE_ACCESSES_END();
        });
    // Runs on the transport's event loop thread (which reads every flow of the process), as
    // RpcRemoteRendezvous runs it on gRPC's: the executor schedules the kernels it makes ready on its
    // own pool and the device copy is asynchronous, so the loop is back reading soon.
    auto finish = [complete, call, recv_args, to_device, copy_context, dst_device,
                   key = std::string(parsed.FullKey())](const absl::Status& status, const Tensor& tensor,
                                                        bool is_dead) {
      if (!to_device || !status.ok() || is_dead || !call->status().ok()) {
        // The bytes just read into the tensor's buffer: TF may pass the tensor on to a Send whose
        // consumer our producer side then writes it to (ServeCallback claims it there), or free it
        // and hand the memory to a kernel's output that our writer sends (tsan.h, ReleaseBytes).
        absl::string_view bytes = FlatBytes(tensor);
        ReleaseBytes(bytes.data(), bytes.size());
        (*complete)(status, Args(), recv_args, tensor, is_dead);
        return;
      }
      auto staged = std::make_shared<Tensor>(tensor);  // back to the pool once the copy is done
      auto on_device = std::make_shared<Tensor>(dst_device->GetAllocator(recv_args.alloc_attrs), tensor.dtype(),
                                                tensor.shape());
      if (!on_device->IsInitialized()) {
        (*complete)(absl::ResourceExhaustedError(absl::StrCat("Geryon data plane: ", dst_device->name(),
                                                              " could not allocate ", tensor.TotalBytes(),
                                                              " bytes for tensor ", key)),
                    Args(), recv_args, Tensor(), false);
        return;
      }
      CountStaging(StagingEvent::kReceive);
      copy_context->CopyCPUTensorToDevice(
          staged.get(), dst_device, on_device.get(),
          [complete, call, recv_args, staged, on_device, dst_device, key](const absl::Status& copied) {
            if (!call->status().ok()) CountStaging(StagingEvent::kAbortedDuringCopy);
            absl::Status s = copied.ok() ? copied : CopyFailed(copied, "into", dst_device->name(), key);
            (*complete)(s, Args(), recv_args, *on_device, false);
          },
          /*sync_dst_compute=*/true);
    };
    call->SetHandle(transport_->Recv(src_task, cls, step_id_, std::string(parsed.FullKey()), allocator,
                                     std::move(finish)));
  }

 private:
  ~GeryonRemoteRendezvous() override { GERYON_HAPPENS_AFTER(this); }
  Transport* const transport_;  // lives as long as the process
};

class GeryonRendezvousMgr : public tensorflow::BaseRendezvousMgr {
 public:
  GeryonRendezvousMgr(const WorkerEnv* env, Transport* transport)
      : BaseRendezvousMgr(env), transport_(transport) {}

 protected:
  tsl::core::RefCountPtr<BaseRemoteRendezvous> Create(int64_t step_id, const WorkerEnv* worker_env) override {
    return tsl::core::RefCountPtr<BaseRemoteRendezvous>(
        new GeryonRemoteRendezvous(worker_env, step_id, transport_));
  }

 private:
  Transport* const transport_;
};

// What Serve hands TF's rendezvous: runs when the tensor is there, on whichever thread produced it.
// A class and not a lambda so that it knows its own address: std::function keeps it on the heap,
// where TF's rendezvous item holds it, and it is announced there on construction and claimed there
// when TF runs it (tsan.h; TF orders the two under its bucket lock, local_rendezvous.cc).
class ServeCallback {
 public:
  ServeCallback(ServeDone done, Device* src_device, std::string key)
      : done_(std::move(done)), src_device_(src_device), key_(std::move(key)) {
    GERYON_HAPPENS_BEFORE(this);
  }
  ServeCallback(ServeCallback&& o) : done_(std::move(o.done_)), src_device_(o.src_device_), key_(std::move(o.key_)) {
    GERYON_HAPPENS_BEFORE(this);
  }
  ServeCallback(const ServeCallback& o) : done_(o.done_), src_device_(o.src_device_), key_(o.key_) {
    GERYON_HAPPENS_BEFORE(this);
  }
  ServeCallback& operator=(const ServeCallback&) = delete;

  void operator()(const absl::Status& status, const Rendezvous::Args& send_args, const Rendezvous::Args&,
                  const Tensor& given, bool is_dead) {
    GERYON_HAPPENS_AFTER(this);
    // `given` and `send_args` are TF's, in its rendezvous item, built on the producing kernel's
    // thread and handed over under TF's lock: copied into ours without recording the reads (tsan.h).
    Tensor val;
    tensorflow::AllocatorAttributes alloc_attrs;
    DeviceContext* device_context;
    absl::string_view bytes;
    GERYON_IGNORE_ACCESSES_BEGIN();
    val = given;
    alloc_attrs = send_args.alloc_attrs;
    device_context = send_args.device_context;
    bytes = FlatBytes(val);
    GERYON_IGNORE_ACCESSES_END();
    // A tensor our consumer side read from another flow (TF passed it on to this Send), or one in
    // memory such a tensor had before TF's allocator reused it: its bytes were announced there
    // (RecvFromRemoteAsync) and are claimed before the transport writes them.
    ClaimBytes(bytes.data(), bytes.size());
    if (!status.ok() || is_dead || !IsAcceleratorTensor(src_device_, alloc_attrs)) {
      done_(status, val, is_dead);  // host memory: the transport writes the tensor's own buffer
      return;
    }
    // From device memory: copy into a pooled host staging tensor (as GrpcWorker does), then
    // the usual write; the staging buffer returns to the pool when the write is done with it.
    DeviceContext* context = CopyContext(src_device_, device_context);
    tensorflow::Allocator* staging = nullptr;
    absl::Status s = context == nullptr ? NoDeviceContext(src_device_->name(), key_)
                                        : StagingAllocatorFor(src_device_, &staging);
    auto host = s.ok() ? std::make_shared<Tensor>(staging, val.dtype(), val.shape()) : nullptr;
    if (s.ok() && !host->IsInitialized()) {
      s = absl::ResourceExhaustedError(absl::StrCat("Geryon data plane: no host staging memory (", val.TotalBytes(),
                                                    " bytes) to send tensor ", key_, " from ", src_device_->name()));
    }
    if (!s.ok()) {
      done_(s, Tensor(), false);
      return;
    }
    CountStaging(StagingEvent::kSend);
    auto source = std::make_shared<Tensor>(val);  // keeps the device buffer until the copy is done
    context->CopyDeviceTensorToCPU(source.get(), key_, src_device_, host.get(),
                                   [done = done_, host, source, src_device = src_device_,
                                    key = key_](const absl::Status& c) {
                                     if (!c.ok()) {
                                       done(CopyFailed(c, "out of", src_device->name(), key), Tensor(), false);
                                       return;
                                     }
                                     done(absl::OkStatus(), *host, false);
                                   });
  }

 private:
  ServeDone done_;
  Device* src_device_;
  std::string key_;
};

// Producer side: the tensor a peer asked for, from this task's own rendezvous (as GrpcWorker does).
void Serve(const WorkerEnv* env, int64_t step_id, const std::string& key, ServeDone done) {
  Rendezvous::ParsedKey parsed;
  absl::Status s = Rendezvous::ParseKey(key, &parsed);
  Device* src_device = nullptr;
  if (s.ok()) s = env->device_mgr->LookupDevice(parsed.src_device, &src_device);
  if (s.ok() && src_device->attributes().incarnation() != parsed.src_incarnation) {
    // TF's own shape (Worker::PrepareRecvTensor): its words, which TF's PS tests look for, and the
    // kWorkerPossiblyRestarted payload (an empty WorkerPossiblyRestarted proto, i.e. no bytes), by
    // which TF's runtime tells a restarted task from a failed call. The payload crosses in the error
    // frame (error_frame.h); the consumer adds the remote-target tag, as gRPC does.
    const std::string device(parsed.src_device);
    s = absl::AbortedError(absl::StrCat(
        "Geryon data plane: RecvTensor expects a different device incarnation: ", parsed.src_incarnation, " vs. ",
        src_device->attributes().incarnation(), ". Your worker job (\"", device.substr(0, device.find("/device:")),
        "\") was probably restarted. Check your worker job for the reason why it was restarted."));
    s.SetPayload(tensorflow::kWorkerPossiblyRestarted, absl::Cord());
  }
  if (!s.ok()) {
    done(s, Tensor(), false);
    return;
  }
  env->rendezvous_mgr->RecvLocalAsync(step_id, parsed, ServeCallback(std::move(done), src_device, key));
}

// Producer side: aborts step `step_id` here, as TF's worker does when a RecvTensor call is cancelled
// (Worker::AbortStep, grpc_worker_service.cc): the step's rendezvous is found through the worker's
// rendezvous manager at once (while the waiting request keeps it there) and aborted a second later
// with TF's own words, so that the root cause (the consumer's own error) reaches the master first.
// Called on the transport's event loop, which must not block: Find takes the manager's lock, so all
// of it runs on a thread of TF's Env (SchedClosure; TF's SchedNonBlockingClosureAfter is that Env's
// SchedClosureAfter, which sleeps on such a thread too).
void AbortStep(const WorkerEnv* env, int64_t step_id, const std::string& why) {
  LOG(WARNING) << "Geryon data plane: " << why << "; aborting step " << step_id << " in 1 s, as TF's worker does";
  env->env->SchedClosure([env, step_id] {
    constexpr int64_t kDelayMicros = 1000 * 1000;  // TF's delay in Worker::AbortStep
    // Find hands over one reference, dropped when `rendezvous` goes (TF's Unref).
    tsl::core::RefCountPtr<tensorflow::RemoteRendezvous> rendezvous = env->rendezvous_mgr->Find(step_id);
    if (!rendezvous) return;
    // TF's manager hands the rendezvous over through its table and refcount, which TSAN cannot see:
    // claim its announcement (made at construction, and before every Unref of ours), and announce
    // ours before our Unref, whose decrement is left unrecorded, as RecvFromRemoteAsync's completion
    // does (tsan.h). The same address: RemoteRendezvous is our rendezvous' primary base.
    GERYON_HAPPENS_AFTER(rendezvous.get());
    env->env->SleepForMicroseconds(kDelayMicros);
    rendezvous->StartAbort(absl::AbortedError(absl::StrCat("Step ", step_id, " cancelled.  Cancelling rendezvous.")));
    GERYON_HAPPENS_BEFORE(rendezvous.get());
    GERYON_IGNORE_ACCESSES_BEGIN();
    rendezvous.reset();
    GERYON_IGNORE_ACCESSES_END();
  });
}

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), port)) return false;
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  return true;
}

absl::Status DataPortOffset(int* offset) {
  *offset = kDefaultPortOffset;
  const char* env = std::getenv("GERYON_DATA_PORT_OFFSET");
  if (env == nullptr || *env == '\0') return absl::OkStatus();
  if (!absl::SimpleAtoi(env, offset) || *offset == 0 || *offset < -65535 || *offset > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("GERYON_DATA_PORT_OFFSET must be a non-zero integer in "
                                                   "-65535..65535, got '",
                                                   env, "'"));
  }
  return absl::OkStatus();
}

// Every task's data-plane address: the host of its gRPC address, port = gRPC port + offset. A fixed
// offset needs no discovery round trip before the first tensor, and every task computes the same map
// from the cluster spec it already has. `local_port`: the local task's gRPC port when the ServerDef
// overrides its address (ServerDef.port), else 0. `need_local`: the local task must be in `cluster`
// (a server's own def; a session's cluster only adds tasks).
absl::Status MakeClusterView(const tensorflow::ClusterDef& cluster, const std::string& job_name, int task_index,
                             int local_port, bool need_local, ClusterView* view) {
  int offset;
  TF_RETURN_IF_ERROR(DataPortOffset(&offset));
  view->tasks.clear();
  view->grpc_ports.clear();
  view->local_task = absl::StrCat("/job:", job_name, "/replica:0/task:", task_index);
  for (const auto& job : cluster.job()) {
    for (const auto& [index, address] : job.tasks()) {
      PeerAddress peer;
      peer.task = absl::StrCat("/job:", job.name(), "/replica:0/task:", index);
      int grpc_port;
      if (!SplitHostPort(address, &peer.host, &grpc_port)) {
        return absl::InvalidArgumentError(
            absl::StrCat("cluster spec: the address of ", peer.task, " is '", address, "', expected host:port"));
      }
      if (peer.task == view->local_task && local_port != 0) grpc_port = local_port;
      view->grpc_ports.insert(grpc_port);
      peer.data_port = grpc_port + offset;
      if (peer.data_port < 1 || peer.data_port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat("Geryon data plane: ", peer.task, " has gRPC port ", grpc_port,
                                                       ", so its data port ", peer.data_port,
                                                       " is out of range; set GERYON_DATA_PORT_OFFSET"));
      }
      if (peer.task == view->local_task) view->local_data_port = peer.data_port;
      view->tasks[peer.task] = peer;
    }
  }
  if (need_local && view->local_data_port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster spec: the local task ", view->local_task, " is not in the cluster"));
  }
  return absl::OkStatus();
}

absl::Status MakeClusterView(const tensorflow::ServerDef& def, ClusterView* view) {
  return MakeClusterView(def.cluster(), def.job_name(), def.task_index(), def.port(), /*need_local=*/true, view);
}

// TF's worker cache for one cluster, owned, with that cluster's tasks known to the data plane for
// exactly as long as TF keeps the cache. TF owns each worker cache it makes with the thing it serves:
// a session's WorkerSession (SessionMgr::CreateSession; replaced on UpdateSession; destroyed when the
// session ends: DeleteSession, e.g. the eager service's CloseContext or a context's keep-alive
// expiry, or the master's DeleteWorkerSession), a MasterSession, or the SessionMgr's default cache
// (the server def; replaced on UpdateServerDef). So a task that only an ended session named is
// forgotten when that session's cache goes, and tasks of the server def and of live sessions stay.
class KnownWorkerCache : public tensorflow::WorkerCacheWrapper {
 public:
  KnownWorkerCache(std::unique_ptr<tensorflow::WorkerCacheInterface> cache, Transport* transport, uint64_t cluster)
      : WorkerCacheWrapper(cache.get()), cache_(std::move(cache)), transport_(transport), cluster_(cluster) {}
  ~KnownWorkerCache() override { transport_->ForgetCluster(cluster_); }

 private:
  const std::unique_ptr<tensorflow::WorkerCacheInterface> cache_;  // outlives the base's pointer to it
  Transport* const transport_;  // lives as long as the process
  const uint64_t cluster_;
};

class GeryonServer : public tensorflow::GrpcServer {
 public:
  GeryonServer(const tensorflow::ServerDef& def, tensorflow::Env* env, Transport* transport)
      : GrpcServer(def, env), transport_(transport) {}

  static absl::Status Create(const tensorflow::ServerDef& def, tensorflow::DeviceMgr* local_device_mgr,
                             std::unique_ptr<tensorflow::ServerInterface>* out) {
    ClusterView view;
    TF_RETURN_IF_ERROR(MakeClusterView(def, &view));
    TF_RETURN_IF_ERROR(ConfigureStagingPools());
    absl::Status s;
    // Never freed: TF does not tear servers down cleanly, and the flows' threads use it until exit.
    Transport* transport = NewTcpTransport(view, &s).release();
    TF_RETURN_IF_ERROR(s);
    std::unique_ptr<GeryonServer> server(new GeryonServer(def, tensorflow::Env::Default(), transport));
    tensorflow::GrpcServerOptions options;
    options.rendezvous_mgr_func = [transport](const WorkerEnv* env) {
      return new GeryonRendezvousMgr(env, transport);
    };
    options.local_device_mgr = local_device_mgr;
    TF_RETURN_IF_ERROR(server->Init(options));
    const WorkerEnv* env = server->worker_env();
    TF_RETURN_IF_ERROR(transport->Start(
        [env](int64_t step_id, const std::string& key, ServeDone done) { Serve(env, step_id, key, std::move(done)); },
        [env](int64_t step_id, const std::string& why) { AbortStep(env, step_id, why); }));
    *out = std::move(server);
    return absl::OkStatus();
  }

  absl::Status UpdateServerDef(const tensorflow::ServerDef& def) override {
    ClusterView view;
    TF_RETURN_IF_ERROR(MakeClusterView(def, &view));  // nothing changes on a bad def
    TF_RETURN_IF_ERROR(GrpcServer::UpdateServerDef(def));
    transport_->SetServerCluster(view);
    return absl::OkStatus();
  }

 protected:
  // TF makes a worker cache from a cluster whenever it learns one: the server's own (Init,
  // UpdateServerDef), and each session's (SessionMgr::CreateSession / UpdateSession; the eager
  // service's CreateContext and UpdateContext, which is how a coordinator that joins as "chief"
  // with `connect_to_cluster`, or a replaced task, reaches the servers). Learning the tasks here
  // makes them reachable on the data plane, and allowed to connect to it, at the moment TF's own
  // gRPC can reach them; tasks of no cluster TF holds (KnownWorkerCache) stay, or become, refused.
  absl::Status WorkerCacheFactory(const tensorflow::WorkerCacheFactoryOptions& options,
                                  tensorflow::WorkerCacheInterface** worker_cache) override {
    if (options.cluster_def.job_size() == 0) return GrpcServer::WorkerCacheFactory(options, worker_cache);
    ClusterView view;
    TF_RETURN_IF_ERROR(MakeClusterView(options.cluster_def, options.job_name, options.task_index, 0,
                                       /*need_local=*/false, &view));
    const uint64_t cluster = transport_->LearnCluster(view);
    tensorflow::WorkerCacheInterface* cache = nullptr;
    absl::Status s = GrpcServer::WorkerCacheFactory(options, &cache);
    if (!s.ok() || cache == nullptr) {
      transport_->ForgetCluster(cluster);
      *worker_cache = cache;
      return s;
    }
    *worker_cache = new KnownWorkerCache(std::unique_ptr<tensorflow::WorkerCacheInterface>(cache), transport_, cluster);
    return absl::OkStatus();
  }

 private:
  Transport* const transport_;
};

class GeryonServerFactory : public tensorflow::ServerFactory {
 public:
  bool AcceptsOptions(const tensorflow::ServerDef& def) override { return def.protocol() == kProtocol; }

  absl::Status NewServer(const tensorflow::ServerDef& def, const Options& options,
                         std::unique_ptr<tensorflow::ServerInterface>* out) override {
    return GeryonServer::Create(def, options.local_device_mgr, out);
  }
};

struct Registrar {
  Registrar() { tensorflow::ServerFactory::Register("GERYON_SERVER", new GeryonServerFactory()); }
};
Registrar registrar;

}  // namespace
}  // namespace geryon

// ---- C entry points for Python (ctypes) ------------------------------------------------------------

extern "C" {

// The TensorFlow release this library was compiled against; Python refuses to use it with another.
__attribute__((visibility("default"))) const char* geryon_rendezvous_tf_version() { return GERYON_TF_VERSION; }

// Writes the per-flow counters as JSON into buf (NUL-terminated) when it fits; returns the length
// the JSON needs (without the NUL), so a caller can retry with a larger buffer.
__attribute__((visibility("default"))) long geryon_flow_counters(char* buf, long size) {
  std::string json = geryon::FlowCountersJson();
  if (buf != nullptr && size > static_cast<long>(json.size())) {
    std::memcpy(buf, json.data(), json.size());
    buf[json.size()] = '\0';
  }
  return static_cast<long>(json.size());
}

// This process's classification report (fallback.h) as JSON, same calling convention.
__attribute__((visibility("default"))) long geryon_classification_report(char* buf, long size) {
  std::string json = geryon::ClassificationReportJson();
  if (buf != nullptr && size > static_cast<long>(json.size())) {
    std::memcpy(buf, json.data(), json.size());
    buf[json.size()] = '\0';
  }
  return static_cast<long>(json.size());
}

// Tests: runs a fresh FallbackWindow (fallback.h) over n synthetic unresolved responses (time,
// bytes, whether no map_table was installed, the process's producer bytes so far) and writes the
// verdicts of the windows that closed as JSON, same calling convention as geryon_flow_counters.
__attribute__((visibility("default"))) long geryon_fallback_window_run(const int64_t* now_ns, const uint64_t* bytes,
                                                                      const int* no_table, const uint64_t* totals,
                                                                      const char* const* edges, int n, char* buf,
                                                                      long size) {
  geryon::FallbackWindow window;
  std::string json = "[";
  for (int i = 0; i < n; ++i) {
    geryon::FallbackWindow::Verdict v;
    const uint64_t total = totals[i];
    if (!window.Add(now_ns[i], edges[i], bytes[i], no_table[i] != 0, [total] { return total; }, &v)) continue;
    absl::StrAppend(&json, json.size() > 1 ? "," : "", "{\"at\":", i, ",\"seconds\":", v.seconds,
                    ",\"total_bytes\":", v.total_bytes, ",\"unresolved_bytes\":", v.unresolved_bytes,
                    ",\"no_table_bytes\":", v.no_table_bytes, ",\"messages\":", v.unresolved_messages,
                    ",\"no_table\":", v.no_table ? "true" : "false", ",\"untraced\":", v.untraced ? "true" : "false",
                    ",\"top\":[");
    for (size_t k = 0; k < v.top.size(); ++k) {
      absl::StrAppend(&json, k > 0 ? "," : "", "[\"", v.top[k].first, "\",", v.top[k].second.first, "]");
    }
    json += "]}";
  }
  json += "]";
  if (buf != nullptr && size > static_cast<long>(json.size())) {
    std::memcpy(buf, json.data(), json.size());
    buf[json.size()] = '\0';
  }
  return static_cast<long>(json.size());
}

// Tests: 1 when an unresolved response on `edge` with `payload_bytes` counts toward the fallback
// window's share, 0 when it is left out (fallback.h, CountsForFallback).
__attribute__((visibility("default"))) int geryon_fallback_counts(const char* edge, uint64_t payload_bytes) {
  return geryon::CountsForFallback(edge, payload_bytes) ? 1 : 0;
}

// The staging pools (device tensors) as JSON, same calling convention as geryon_flow_counters.
__attribute__((visibility("default"))) long geryon_staging_stats(char* buf, long size) {
  std::string json = geryon::StagingStatsJson();
  if (buf != nullptr && size > static_cast<long>(json.size())) {
    std::memcpy(buf, json.data(), json.size());
    buf[json.size()] = '\0';
  }
  return static_cast<long>(json.size());
}

// Sets DSCP and SO_PRIORITY of classes 0..n-1 for connections made from now on; 0, or -1 when a
// value is out of range (nothing changed then).
__attribute__((visibility("default"))) int geryon_set_class_marks(const int* dscp, const int* priority, int n) {
  return geryon::SetClassMarks(dscp, priority, n) ? 0 : -1;
}

// Marks every open flow's socket again with its class's current marks (after geryon_set_class_marks,
// so a change reaches flows already open): the number of sockets re-marked.
__attribute__((visibility("default"))) int geryon_remark_open_flows() { return geryon::OpenFlowRegistry().Remark(); }

// The number of open flows (consumer and producer sockets) a re-mark would reach.
__attribute__((visibility("default"))) int geryon_open_flows() { return geryon::OpenFlowRegistry().size(); }

__attribute__((visibility("default"))) int geryon_class_marks(int cls, int* dscp, int* priority) {
  if (cls < 0 || cls >= geryon::kMaxClasses) return -1;
  *dscp = geryon::DscpForClass(cls);
  *priority = geryon::PriorityForClass(cls);
  return 0;
}

__attribute__((visibility("default"))) int geryon_class_for_edge(const char* edge_name) {
  return geryon::ClassForEdge(edge_name);
}

__attribute__((visibility("default"))) int geryon_num_classes() { return geryon::NumClasses(); }

// Mean nanoseconds of one ClassForEdge lookup over `iterations` calls (the per-tensor cost).
__attribute__((visibility("default"))) double geryon_bench_class_lookup_ns(const char* edge_name, long iterations) {
  absl::string_view edge(edge_name);
  volatile int sink = 0;
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) sink = sink + geryon::ClassForEdge(edge);
  auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  return iterations > 0 ? ns / static_cast<double>(iterations) : 0.0;
}

}  // extern "C"
