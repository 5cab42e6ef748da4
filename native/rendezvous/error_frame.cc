// The payload section of an error response (error_frame.h).
#include "error_frame.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace geryon {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

int AppendErrorPayloads(const absl::Status& status, std::string* out) {
  std::vector<std::pair<std::string, absl::Cord>> kept;
  int left_out = 0;
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& value) {
    if (kept.size() >= kMaxErrorPayloads || url.empty() || url.size() > kMaxPayloadUrlBytes ||
        value.size() > kMaxPayloadValueBytes) {
      ++left_out;
      return;
    }
    kept.emplace_back(std::string(url), value);
  });
  Put<uint16_t>(out, static_cast<uint16_t>(kept.size()));
  for (const auto& [url, value] : kept) {
    Put<uint16_t>(out, static_cast<uint16_t>(url.size()));
    out->append(url);
    Put<uint32_t>(out, static_cast<uint32_t>(value.size()));
    for (absl::string_view piece : value.Chunks()) out->append(piece.data(), piece.size());
  }
  return left_out;
}

PayloadParse ParseErrorPayloads(const char* data, size_t n, absl::Status* status, uint64_t* bytes, size_t* need,
                                std::string* error) {
  size_t at = 0;
  // The next `size` bytes, or kNeedMore (`*need`: up to their end).
  auto have = [&](size_t size) {
    if (n - at >= size) return true;
    *need = at + size;
    return false;
  };
  uint16_t count;
  if (!have(2)) return PayloadParse::kNeedMore;
  std::memcpy(&count, data, 2);
  at = 2;
  if (count > kMaxErrorPayloads) {
    *error = absl::StrCat("malformed error frame (", count, " payloads, at most ", kMaxErrorPayloads, ")");
    return PayloadParse::kFailed;
  }
  std::vector<std::pair<absl::string_view, absl::string_view>> payloads;
  for (uint16_t i = 0; i < count; ++i) {
    uint16_t url_len;
    if (!have(2)) return PayloadParse::kNeedMore;
    std::memcpy(&url_len, data + at, 2);
    at += 2;
    if (url_len == 0 || url_len > kMaxPayloadUrlBytes) {
      *error = absl::StrCat("malformed error frame (payload ", i, ": type URL of ", url_len, " bytes, expected 1..",
                            kMaxPayloadUrlBytes, ")");
      return PayloadParse::kFailed;
    }
    if (!have(url_len)) return PayloadParse::kNeedMore;
    const absl::string_view url(data + at, url_len);
    at += url_len;
    uint32_t value_len;
    if (!have(4)) return PayloadParse::kNeedMore;
    std::memcpy(&value_len, data + at, 4);
    at += 4;
    if (value_len > kMaxPayloadValueBytes) {
      *error = absl::StrCat("malformed error frame (payload ", i, ": value of ", value_len, " bytes, at most ",
                            kMaxPayloadValueBytes, ")");
      return PayloadParse::kFailed;
    }
    if (!have(value_len)) return PayloadParse::kNeedMore;
    payloads.emplace_back(url, absl::string_view(data + at, value_len));
    at += value_len;
  }
  for (const auto& [url, value] : payloads) status->SetPayload(url, absl::Cord(value));
  *bytes = at;
  return PayloadParse::kDone;
}

}  // namespace geryon
