// The payload section of an error response (error_frame.h).
#include "error_frame.h"

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

bool ReadErrorPayloads(FrameReader* reader, absl::Status* status, uint64_t* bytes, std::string* error) {
  uint16_t count;
  if (!reader->Get(&count, error)) return false;
  *bytes = 2;
  if (count > kMaxErrorPayloads) {
    *error = absl::StrCat("malformed error frame (", count, " payloads, at most ", kMaxErrorPayloads, ")");
    return false;
  }
  std::string url, value;
  for (uint16_t i = 0; i < count; ++i) {
    uint16_t url_len;
    if (!reader->Get(&url_len, error)) return false;
    if (url_len == 0 || url_len > kMaxPayloadUrlBytes) {
      *error = absl::StrCat("malformed error frame (payload ", i, ": type URL of ", url_len, " bytes, expected 1..",
                            kMaxPayloadUrlBytes, ")");
      return false;
    }
    url.resize(url_len);
    if (!reader->Read(url.data(), url_len, error)) return false;
    uint32_t value_len;
    if (!reader->Get(&value_len, error)) return false;
    if (value_len > kMaxPayloadValueBytes) {
      *error = absl::StrCat("malformed error frame (payload ", i, ": value of ", value_len, " bytes, at most ",
                            kMaxPayloadValueBytes, ")");
      return false;
    }
    value.resize(value_len);
    if (value_len > 0 && !reader->Read(value.data(), value_len, error)) return false;
    *bytes += 6 + url_len + value_len;
    status->SetPayload(url, absl::Cord(value));
  }
  return true;
}

}  // namespace geryon
