// Host staging buffers for tensors in accelerator memory.
//
// A receive into device memory reads the socket into a host staging tensor and then copies it to
// the device with the device's DeviceContext; a send from device memory copies into a staging
// tensor and writes that (TF's own RPC rendezvous does the same: GrpcWorker::GrpcRecvTensorAsync on
// the sending side). Staging memory comes from the device's host allocator with
// on_host + gpu_compatible (pinned memory on a GPU, so the DMA engine can read it without a
// bounce), and is pooled per device so that a step's hot path allocates nothing: each buffer goes
// back to its pool when its tensor is freed.
//
// The pool is bounded (GERYON_STAGING_POOL_BYTES, default 256 MiB per device): a staging buffer that
// would push the cached bytes past the bound first evicts free buffers, and if that is not enough
// it is allocated outside the pool and freed when its tensor is (never blocks, never fails for
// the bound alone).
#ifndef GERYON_NATIVE_RENDEZVOUS_STAGING_H_
#define GERYON_NATIVE_RENDEZVOUS_STAGING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "tensorflow/core/common_runtime/device.h"
#include "tensorflow/core/framework/allocator.h"

namespace geryon {

constexpr int64_t kDefaultStagingPoolBytes = int64_t{256} << 20;

// Reads and checks GERYON_STAGING_POOL_BYTES (a whole number of bytes, 0 = cache nothing) and makes
// it the bound of pools created from now on. Called when a server is created, so a bad value is
// an error at startup and not at the first device tensor.
absl::Status ConfigureStagingPools();

// The staging allocator of `device` (created on first use, lives as long as the process).
absl::Status StagingAllocatorFor(tensorflow::Device* device, tensorflow::Allocator** out);

// What went through staging, for tests and benchmarks.
// kAbortedDuringCopy: a receive whose step was aborted while its host->device copy ran.
enum class StagingEvent { kReceive, kSend, kCopyFailure, kAbortedDuringCopy };
void CountStaging(StagingEvent event);

// Per-device pool counters and the staged transfer counts, as a JSON object.
std::string StagingStatsJson();

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_STAGING_H_
