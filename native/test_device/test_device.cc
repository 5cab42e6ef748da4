// GERYONTEST: a test-only PluggableDevice whose "device memory" is host memory.
//
// Why: the machines this project is tested on have no accelerator, but the data plane's device
// path (staging + DeviceContext::CopyCPUTensorToDevice / CopyDeviceTensorToCPU) must run against
// real TensorFlow. A PluggableDevice registered through TF's StreamExecutor C API
// (tensorflow/c/experimental/stream_executor/stream_executor.h, the API Intel's and Apple's GPU
// plugins use) is a real non-CPU device to TF: the placer puts ops with DEVICE_DEFAULT kernels
// (Identity, _Send, _Recv) on it, tensors placed there are allocated with this plugin's allocator,
// and every host<->device copy goes through PluggableDeviceContext -> the memcpy callbacks below.
// Only the memory is fake (malloc); everything above it is TF's own code.
//
// Streams run every operation synchronously when it is enqueued, so events are complete as soon
// as they are recorded: a valid (if slow) stream, like a GPU with one in-order queue that is
// always drained.
//
// Test hooks, read once when the plugin loads:
//   GERYON_TEST_DEVICE_SLOW_BYTES=N, GERYON_TEST_DEVICE_SLOW_MS=M: a host<->device copy of exactly N
//     bytes takes M ms more (to abort a receive mid-copy).
//   GERYON_TEST_DEVICE_FAIL_HTOD_BYTES=N: a host->device copy of exactly N bytes fails.
// Counters: geryon_test_device_counters() (ctypes), see kCounterNames.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tensorflow/c/experimental/stream_executor/stream_executor.h"
#include "tensorflow/c/tf_status.h"

// The C API's opaque handles (global names, declared in stream_executor.h). Empty: every operation
// runs when it is enqueued, so there is no queue or state to keep.
struct SP_Stream_st {};
struct SP_Event_st {};
struct SP_Timer_st {};

namespace {

constexpr char kPlatformName[] = "GERYONTEST";
constexpr char kDeviceType[] = "GERYONTEST";
constexpr size_t kAlignment = 64;  // TF's EIGEN_MAX_ALIGN_BYTES is at most 64
constexpr int64_t kMemoryBytes = int64_t{8} << 30;

enum Counter { kHtoD, kHtoDBytes, kDtoH, kDtoHBytes, kHostAllocs, kDeviceAllocs, kInjectedFailures, kNumCounters };
std::atomic<int64_t> counters[kNumCounters];

struct Hooks {
  uint64_t slow_bytes = 0;
  int64_t slow_ms = 0;
  uint64_t fail_htod_bytes = 0;
};
Hooks hooks;

uint64_t EnvU64(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : std::strtoull(v, nullptr, 10);
}

void* AlignedAlloc(uint64_t size) {
  size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
}

void MaybeSlow(uint64_t size) {
  if (hooks.slow_bytes != 0 && size == hooks.slow_bytes && hooks.slow_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(hooks.slow_ms));
  }
}

void CopyHtoD(void* dst, const void* src, uint64_t size, TF_Status* status) {
  MaybeSlow(size);
  if (hooks.fail_htod_bytes != 0 && size == hooks.fail_htod_bytes) {
    counters[kInjectedFailures]++;
    TF_SetStatus(status, TF_DATA_LOSS, "GERYONTEST: injected host-to-device copy failure");
    return;
  }
  std::memcpy(dst, src, size);
  counters[kHtoD]++;
  counters[kHtoDBytes] += static_cast<int64_t>(size);
  TF_SetStatus(status, TF_OK, "");
}

void CopyDtoH(void* dst, const void* src, uint64_t size, TF_Status* status) {
  MaybeSlow(size);
  std::memcpy(dst, src, size);
  counters[kDtoH]++;
  counters[kDtoHBytes] += static_cast<int64_t>(size);
  TF_SetStatus(status, TF_OK, "");
}

void Ok(TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }

// ---- memory ----
void Allocate(const SP_Device*, uint64_t size, int64_t, SP_DeviceMemoryBase* mem) {
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = AlignedAlloc(size);
  mem->size = mem->opaque == nullptr ? 0 : size;
  counters[kDeviceAllocs]++;
}
void Deallocate(const SP_Device*, SP_DeviceMemoryBase* mem) { std::free(mem->opaque); }
// "Pinned" host memory: plain aligned memory, counted so tests see the staging pool's allocations.
void* HostMemoryAllocate(const SP_Device*, uint64_t size) {
  counters[kHostAllocs]++;
  return AlignedAlloc(size);
}
void HostMemoryDeallocate(const SP_Device*, void* mem) { std::free(mem); }
TF_Bool GetAllocatorStats(const SP_Device*, SP_AllocatorStats*) { return false; }
TF_Bool DeviceMemoryUsage(const SP_Device*, int64_t* free, int64_t* total) {
  *free = kMemoryBytes;
  *total = kMemoryBytes;
  return true;
}

// ---- streams, events, timers: all synchronous ----

void CreateStream(const SP_Device*, SP_Stream* stream, TF_Status* status) {
  *stream = new SP_Stream_st;
  Ok(status);
}
void DestroyStream(const SP_Device*, SP_Stream stream) { delete stream; }
void CreateStreamDependency(const SP_Device*, SP_Stream, SP_Stream, TF_Status* status) { Ok(status); }
void GetStreamStatus(const SP_Device*, SP_Stream, TF_Status* status) { Ok(status); }
void CreateEvent(const SP_Device*, SP_Event* event, TF_Status* status) {
  *event = new SP_Event_st;
  Ok(status);
}
void DestroyEvent(const SP_Device*, SP_Event event) { delete event; }
SE_EventStatus GetEventStatus(const SP_Device*, SP_Event) { return SE_EVENT_COMPLETE; }
void RecordEvent(const SP_Device*, SP_Stream, SP_Event, TF_Status* status) { Ok(status); }
void WaitForEvent(const SP_Device*, SP_Stream, SP_Event, TF_Status* status) { Ok(status); }
void CreateTimer(const SP_Device*, SP_Timer* timer, TF_Status* status) {
  *timer = new SP_Timer_st;
  Ok(status);
}
void DestroyTimer(const SP_Device*, SP_Timer timer) { delete timer; }
void StartTimer(const SP_Device*, SP_Stream, SP_Timer, TF_Status* status) { Ok(status); }
void StopTimer(const SP_Device*, SP_Stream, SP_Timer, TF_Status* status) { Ok(status); }
uint64_t Nanoseconds(SP_Timer) { return 0; }

// ---- copies ----
void MemcpyDtoH(const SP_Device*, SP_Stream, void* dst, const SP_DeviceMemoryBase* src, uint64_t size,
                TF_Status* status) {
  CopyDtoH(dst, src->opaque, size, status);
}
void MemcpyHtoD(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* dst, const void* src, uint64_t size,
                TF_Status* status) {
  CopyHtoD(dst->opaque, src, size, status);
}
void MemcpyDtoD(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src,
                uint64_t size, TF_Status* status) {
  std::memcpy(dst->opaque, src->opaque, size);
  Ok(status);
}
void SyncMemcpyDtoH(const SP_Device*, void* dst, const SP_DeviceMemoryBase* src, uint64_t size,
                    TF_Status* status) {
  CopyDtoH(dst, src->opaque, size, status);
}
void SyncMemcpyHtoD(const SP_Device*, SP_DeviceMemoryBase* dst, const void* src, uint64_t size,
                    TF_Status* status) {
  CopyHtoD(dst->opaque, src, size, status);
}
void SyncMemcpyDtoD(const SP_Device*, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src, uint64_t size,
                    TF_Status* status) {
  std::memcpy(dst->opaque, src->opaque, size);
  Ok(status);
}
void BlockHostForEvent(const SP_Device*, SP_Event, TF_Status* status) { Ok(status); }
void BlockHostUntilDone(const SP_Device*, SP_Stream, TF_Status* status) { Ok(status); }
void SynchronizeAllActivity(const SP_Device*, TF_Status* status) { Ok(status); }
void MemZero(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* location, uint64_t size, TF_Status* status) {
  std::memset(location->opaque, 0, size);
  Ok(status);
}
void Memset(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* location, uint8_t pattern, uint64_t size,
            TF_Status* status) {
  std::memset(location->opaque, pattern, size);
  Ok(status);
}
void Memset32(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* location, uint32_t pattern, uint64_t size,
              TF_Status* status) {
  auto* p = static_cast<uint32_t*>(location->opaque);
  for (uint64_t i = 0; i < size / 4; ++i) p[i] = pattern;
  Ok(status);
}
// The stream has already done everything enqueued before, so the callback can run now.
TF_Bool HostCallback(const SP_Device*, SP_Stream, SE_StatusCallbackFn fn, void* arg) {
  TF_Status* status = TF_NewStatus();
  fn(arg, status);
  TF_DeleteStatus(status);
  return true;
}

// ---- platform ----
void GetDeviceCount(const SP_Platform*, int* count, TF_Status* status) {
  *count = 1;
  Ok(status);
}
void CreateDevice(const SP_Platform*, SE_CreateDeviceParams* params, TF_Status* status) {
  params->device->struct_size = SP_DEVICE_STRUCT_SIZE;
  params->device->ordinal = params->ordinal;
  params->device->device_handle = nullptr;
  params->device->hardware_name = "geryon-test-device";
  params->device->device_vendor = "geryon";
  params->device->pci_bus_id = "0000:00:00.0";
  Ok(status);
}
void DestroyDevice(const SP_Platform*, SP_Device*) {}
void CreateDeviceFns(const SP_Platform*, SE_CreateDeviceFnsParams* params, TF_Status* status) {
  params->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
  Ok(status);
}
void DestroyDeviceFns(const SP_Platform*, SP_DeviceFns*) {}
void CreateStreamExecutor(const SP_Platform*, SE_CreateStreamExecutorParams* params, TF_Status* status) {
  SP_StreamExecutor* se = params->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = Allocate;
  se->deallocate = Deallocate;
  se->host_memory_allocate = HostMemoryAllocate;
  se->host_memory_deallocate = HostMemoryDeallocate;
  se->get_allocator_stats = GetAllocatorStats;
  se->device_memory_usage = DeviceMemoryUsage;
  se->create_stream = CreateStream;
  se->destroy_stream = DestroyStream;
  se->create_stream_dependency = CreateStreamDependency;
  se->get_stream_status = GetStreamStatus;
  se->create_event = CreateEvent;
  se->destroy_event = DestroyEvent;
  se->get_event_status = GetEventStatus;
  se->record_event = RecordEvent;
  se->wait_for_event = WaitForEvent;
  se->create_timer = CreateTimer;
  se->destroy_timer = DestroyTimer;
  se->start_timer = StartTimer;
  se->stop_timer = StopTimer;
  se->memcpy_dtoh = MemcpyDtoH;
  se->memcpy_htod = MemcpyHtoD;
  se->memcpy_dtod = MemcpyDtoD;
  se->sync_memcpy_dtoh = SyncMemcpyDtoH;
  se->sync_memcpy_htod = SyncMemcpyHtoD;
  se->sync_memcpy_dtod = SyncMemcpyDtoD;
  se->block_host_for_event = BlockHostForEvent;
  se->block_host_until_done = BlockHostUntilDone;
  se->synchronize_all_activity = SynchronizeAllActivity;
  se->mem_zero = MemZero;
  se->memset = Memset;
  se->memset32 = Memset32;
  se->host_callback = HostCallback;
  Ok(status);
}
void DestroyStreamExecutor(const SP_Platform*, SP_StreamExecutor*) {}
void CreateTimerFns(const SP_Platform*, SP_TimerFns* timer_fns, TF_Status* status) {
  timer_fns->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  timer_fns->nanoseconds = Nanoseconds;
  Ok(status);
}
void DestroyTimerFns(const SP_Platform*, SP_TimerFns*) {}
void DestroyPlatform(SP_Platform*) {}
void DestroyPlatformFns(SP_PlatformFns*) {}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status) {
  hooks.slow_bytes = EnvU64("GERYON_TEST_DEVICE_SLOW_BYTES");
  hooks.slow_ms = static_cast<int64_t>(EnvU64("GERYON_TEST_DEVICE_SLOW_MS"));
  hooks.fail_htod_bytes = EnvU64("GERYON_TEST_DEVICE_FAIL_HTOD_BYTES");
  params->major_version = SE_MAJOR;
  params->minor_version = SE_MINOR;
  params->patch_version = SE_PATCH;
  SP_Platform* platform = params->platform;
  platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  platform->name = kPlatformName;
  platform->type = kDeviceType;
  platform->supports_unified_memory = false;
  // TF's BFC arena over this memory, as for a GPU: a step's tensors reuse memory instead of
  // faulting in fresh pages each time (which would make the benchmark measure malloc).
  platform->use_bfc_allocator = true;
  platform->force_memory_growth = true;
  SP_PlatformFns* fns = params->platform_fns;
  fns->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  fns->get_device_count = GetDeviceCount;
  fns->create_device = CreateDevice;
  fns->destroy_device = DestroyDevice;
  fns->create_device_fns = CreateDeviceFns;
  fns->destroy_device_fns = DestroyDeviceFns;
  fns->create_stream_executor = CreateStreamExecutor;
  fns->destroy_stream_executor = DestroyStreamExecutor;
  fns->create_timer_fns = CreateTimerFns;
  fns->destroy_timer_fns = DestroyTimerFns;
  params->destroy_platform = DestroyPlatform;
  params->destroy_platform_fns = DestroyPlatformFns;
  Ok(status);
}

// Names of the values geryon_test_device_counters writes, in order.
__attribute__((visibility("default"))) const char* geryon_test_device_counter_names() {
  return "htod,htod_bytes,dtoh,dtoh_bytes,host_allocs,device_allocs,injected_failures";
}

// Copies up to n counters into out; returns how many there are.
__attribute__((visibility("default"))) int geryon_test_device_counters(int64_t* out, int n) {
  for (int i = 0; i < n && i < kNumCounters; ++i) out[i] = counters[i].load();
  return kNumCounters;
}

}  // extern "C"
