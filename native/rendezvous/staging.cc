// Pooled host staging buffers per accelerator device; see staging.h for why.
#include "staging.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tsan.h"

namespace geryon {
namespace {

// Buffers are cached by power-of-two size class: a step asks for the same shapes every time, so a
// class is reused from the second step on, at most 2x the bytes. 256 B is below any useful tensor.
constexpr size_t kMinClass = 256;

size_t SizeClass(size_t bytes) {
  size_t c = kMinClass;
  while (c < bytes) c <<= 1;
  return c;
}

class StagingPool : public tensorflow::Allocator {
 public:
  StagingPool(std::string device, tensorflow::Allocator* host, int64_t limit)
      : device_(std::move(device)), host_(host), limit_(limit) {}

  std::string Name() override { return "geryon_staging"; }

  void* AllocateRaw(size_t alignment, size_t num_bytes) override {
    // Pool buffers are aligned for any tensor (TF's Allocator::kAllocatorAlignment); a stricter
    // request, or a size no class can hold, is served outside the pool.
    if (alignment > tensorflow::Allocator::kAllocatorAlignment || num_bytes > (size_t{1} << 62)) {
      return Unpooled(alignment, num_bytes);
    }
    const size_t cls = SizeClass(num_bytes);
    MutexLock l(mu_);
    auto& free_list = free_[cls];
    if (!free_list.empty()) {
      void* p = free_list.back();
      free_list.pop_back();
      in_use_[p] = cls;
      in_use_bytes_ += cls;
      ++hits_;
      return p;
    }
    // Make room under the bound by dropping cached buffers nobody uses, largest classes first.
    for (auto it = free_.rbegin(); it != free_.rend() && cached_bytes_ + static_cast<int64_t>(cls) > limit_; ++it) {
      while (!it->second.empty() && cached_bytes_ + static_cast<int64_t>(cls) > limit_) {
        host_->DeallocateRaw(it->second.back());
        it->second.pop_back();
        cached_bytes_ -= static_cast<int64_t>(it->first);
        ++evictions_;
      }
    }
    if (cached_bytes_ + static_cast<int64_t>(cls) > limit_) {
      ++over_bound_;
      void* p = host_->AllocateRaw(alignment, num_bytes);
      if (p != nullptr) in_use_[p] = 0;  // 0: not pooled, freed on return
      return p;
    }
    void* p = host_->AllocateRaw(tensorflow::Allocator::kAllocatorAlignment, cls);
    if (p == nullptr) return nullptr;
    ++misses_;
    cached_bytes_ += static_cast<int64_t>(cls);
    in_use_bytes_ += cls;
    in_use_[p] = cls;
    return p;
  }

  void DeallocateRaw(void* ptr) override {
    if (ptr == nullptr) return;
    MutexLock l(mu_);
    auto it = in_use_.find(ptr);
    if (it == in_use_.end()) {  // cannot happen: every pointer handed out is recorded
      host_->DeallocateRaw(ptr);
      return;
    }
    const size_t cls = it->second;
    in_use_.erase(it);
    if (cls == 0) {
      host_->DeallocateRaw(ptr);
      return;
    }
    in_use_bytes_ -= cls;
    free_[cls].push_back(ptr);
  }

  std::string StatsJson() {
    MutexLock l(mu_);
    return absl::StrCat("{\"device\":\"", device_, "\",\"host_allocator\":\"", host_->Name(), "\",\"limit_bytes\":",
                        limit_, ",\"cached_bytes\":", cached_bytes_, ",\"in_use_bytes\":", in_use_bytes_,
                        ",\"hits\":", hits_, ",\"misses\":", misses_, ",\"evictions\":", evictions_,
                        ",\"over_bound\":", over_bound_, "}");
  }

 private:
  void* Unpooled(size_t alignment, size_t num_bytes) {
    void* p = host_->AllocateRaw(alignment, num_bytes);
    MutexLock l(mu_);
    ++over_bound_;
    if (p != nullptr) in_use_[p] = 0;
    return p;
  }

  const std::string device_;
  tensorflow::Allocator* const host_;  // the device's, lives as long as the device
  const int64_t limit_;
  Mutex mu_;  // ours, not tensorflow::mutex: ThreadSanitizer sees it (tsan.h)
  std::map<size_t, std::vector<void*>> free_ TF_GUARDED_BY(mu_);  // by size class
  // pointer -> size class (0: outside the pool)
  std::unordered_map<void*, size_t> in_use_ TF_GUARDED_BY(mu_);
  int64_t cached_bytes_ TF_GUARDED_BY(mu_) = 0;  // pooled buffers, free or in use
  size_t in_use_bytes_ TF_GUARDED_BY(mu_) = 0;
  int64_t hits_ TF_GUARDED_BY(mu_) = 0;
  int64_t misses_ TF_GUARDED_BY(mu_) = 0;
  int64_t evictions_ TF_GUARDED_BY(mu_) = 0;
  int64_t over_bound_ TF_GUARDED_BY(mu_) = 0;
};

Mutex registry_mu;
std::atomic<int64_t> pool_limit{kDefaultStagingPoolBytes};
std::atomic<int64_t> staged_receives{0}, staged_sends{0}, copy_failures{0}, aborted_during_copy{0};

// By device name: a session may see a device through its own wrapper (RenamedDevice), and the
// producer side sees the worker's; both are one device with one host allocator.
// Never destroyed: tensors may return buffers to a pool until the process exits.
std::map<std::string, StagingPool*>& Pools() TF_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* pools = new std::map<std::string, StagingPool*>();
  return *pools;
}

}  // namespace

absl::Status ConfigureStagingPools() {
  const char* env = std::getenv("GERYON_STAGING_POOL_BYTES");
  int64_t bytes = kDefaultStagingPoolBytes;
  if (env != nullptr && *env != '\0' && (!absl::SimpleAtoi(env, &bytes) || bytes < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GERYON_STAGING_POOL_BYTES must be a whole number of bytes >= 0 (the host staging memory "
        "cached per accelerator device; 0 caches none), got '",
        env, "'"));
  }
  pool_limit = bytes;
  return absl::OkStatus();
}

absl::Status StagingAllocatorFor(tensorflow::Device* device, tensorflow::Allocator** out) {
  MutexLock l(registry_mu);
  auto& pools = Pools();
  auto it = pools.find(device->name());
  if (it != pools.end()) {
    *out = it->second;
    return absl::OkStatus();
  }
  tensorflow::AllocatorAttributes attrs;
  attrs.set_on_host(true);
  attrs.set_gpu_compatible(true);  // pinned host memory where the device has it
  tensorflow::Allocator* host = device->GetAllocator(attrs);
  if (host == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("Geryon data plane: ", device->name(), " has no host allocator for staging buffers"));
  }
  auto* pool = new StagingPool(device->name(), host, pool_limit.load());
  pools[device->name()] = pool;
  *out = pool;
  return absl::OkStatus();
}

void CountStaging(StagingEvent event) {
  switch (event) {
    case StagingEvent::kReceive:
      ++staged_receives;
      break;
    case StagingEvent::kSend:
      ++staged_sends;
      break;
    case StagingEvent::kCopyFailure:
      ++copy_failures;
      break;
    case StagingEvent::kAbortedDuringCopy:
      ++aborted_during_copy;
      break;
  }
}

std::string StagingStatsJson() {
  std::string pools;
  {
    MutexLock l(registry_mu);
    for (const auto& [name, pool] : Pools()) {
      absl::StrAppend(&pools, pools.empty() ? "" : ",", pool->StatsJson());
    }
  }
  return absl::StrCat("{\"staged_receives\":", staged_receives.load(), ",\"staged_sends\":", staged_sends.load(),
                      ",\"copy_failures\":", copy_failures.load(),
                      ",\"aborted_during_copy\":", aborted_during_copy.load(), ",\"pool_limit_bytes\":", pool_limit.load(),
                      ",\"pools\":[", pools, "]}");
}

}  // namespace geryon
