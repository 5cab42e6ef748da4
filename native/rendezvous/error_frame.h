// The payload section of an error response (protocol 5, README.md "Transport protocol"): the
// Status's payloads (type URL + bytes), which TF's gRPC carries in its status details
// (grpc_util.h ToGrpcStatus / FromGrpcStatus) and which TensorFlow reads to classify a failure
// (kWorkerPossiblyRestarted: a restarted task, so ClusterCoordinator treats it as such). Without them
// the consumer's Status would be the producer's code and text only.
#ifndef GERYON_NATIVE_RENDEZVOUS_ERROR_FRAME_H_
#define GERYON_NATIVE_RENDEZVOUS_ERROR_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace geryon {

// Bounds, checked by the consumer before anything is allocated and kept by the producer (which
// leaves out what does not fit). TF's own payloads are a few bytes (an empty WorkerPossiblyRestarted,
// an ErrorSourceProto), so these leave room without letting a frame claim gigabytes.
constexpr uint32_t kMaxErrorPayloads = 16;
constexpr uint32_t kMaxPayloadUrlBytes = 1024;
constexpr uint32_t kMaxPayloadValueBytes = 64 * 1024;

// Appends the payload section of `status`: `u16 count`, then per payload `u16 url_len`, the type
// URL, `u32 value_len`, the value. Payloads past the bounds are left out; returns how many.
int AppendErrorPayloads(const absl::Status& status, std::string* out);

// Parses a payload section out of memory (the consumer's event loop gathers an error frame across
// wake-ups, so it must not block): kNeedMore while `data[0, n)` holds only part of it, with `*need`
// the bytes it needs at least (more may be asked for once those are there); kFailed with `*error`
// naming the field on a section out of bounds (the flow is then out of step and fails); kDone with
// each payload set on `*status` (which must not be OK) and `*bytes` the section's size on the wire.
// `*status` is changed only when the section is whole and good.
enum class PayloadParse { kDone, kNeedMore, kFailed };
PayloadParse ParseErrorPayloads(const char* data, size_t n, absl::Status* status, uint64_t* bytes, size_t* need,
                                std::string* error);

}  // namespace geryon

#endif  // GERYON_NATIVE_RENDEZVOUS_ERROR_FRAME_H_
