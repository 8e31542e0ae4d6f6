#include "freezeframe/graphs/dispatcher.h"

#include <algorithm>

#include "freezeframe/base/error.h"
#include "freezeframe/graphs/capture_sizes.h"

namespace freezeframe {

std::vector<int> default_capture_sizes(int max_size) {
  std::vector<int> sizes;
  for (int s : {1, 2, 4}) {
    if (s <= max_size) sizes.push_back(s);
  }
  for (int s = 8; s <= std::min(248, max_size); s += 8) sizes.push_back(s);
  for (int s = 256; s <= max_size; s += 16) sizes.push_back(s);
  return sizes;
}

int padded_size(std::span<const int> sizes, int num_tokens) {
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), num_tokens);
  return it == sizes.end() ? 0 : *it;
}

std::string BatchDescriptor::describe() const {
  std::string out = "tokens=" + std::to_string(num_tokens);
  if (num_reqs > 0) out += ",reqs=" + std::to_string(num_reqs);
  if (uniform_decode) out += ",uniform";
  return out;
}

std::string_view to_string(RuntimeMode mode) {
  switch (mode) {
    case RuntimeMode::kEager: return "eager";
    case RuntimeMode::kPiecewise: return "piecewise";
    case RuntimeMode::kFull: return "full";
  }
  return "unknown";
}

Dispatcher::Dispatcher(CudaGraphMode mode, std::vector<int> capture_sizes, int max_num_reqs)
    : mode_(mode), sizes_(std::move(capture_sizes)) {
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    FF_CHECK(sizes_[i] > 0 && (i == 0 || sizes_[i] > sizes_[i - 1]), ErrorCode::kInvalidArgument,
             "capture sizes must be positive and strictly ascending; entry ", i, " is ", sizes_[i]);
  }
  if (mode_ == CudaGraphMode::kNone) sizes_.clear();
  const bool full_any = mode_ == CudaGraphMode::kFull;
  const bool full_uniform =
      mode_ == CudaGraphMode::kFullDecodeOnly || mode_ == CudaGraphMode::kFullAndPiecewise;
  const bool piecewise =
      mode_ == CudaGraphMode::kPiecewise || mode_ == CudaGraphMode::kFullAndPiecewise;
  for (auto it = sizes_.rbegin(); it != sizes_.rend(); ++it) {
    // A uniform-decode batch of N tokens has N requests, so its full graph fixes both.
    if (full_any) full_order_.push_back({*it, 0, false});
    if (full_uniform && (max_num_reqs == 0 || *it <= max_num_reqs)) {
      full_order_.push_back({*it, *it, true});
    }
    if (piecewise) piecewise_order_.push_back({*it, 0, false});
  }
  full_.insert(full_order_.begin(), full_order_.end());
  piecewise_.insert(piecewise_order_.begin(), piecewise_order_.end());
}

Dispatch Dispatcher::dispatch(int num_tokens, int num_reqs, bool uniform_decode) const {
  FF_CHECK(num_tokens > 0 && num_reqs > 0 && num_reqs <= num_tokens, ErrorCode::kInvalidArgument,
           "a batch needs 0 < num_reqs <= num_tokens, got ", num_reqs, " requests and ", num_tokens,
           " tokens");
  FF_CHECK(!uniform_decode || num_reqs == num_tokens, ErrorCode::kInvalidArgument,
           "a uniform-decode batch has one token per request, got ", num_tokens, " tokens for ",
           num_reqs, " requests");
  const int padded = padded_size(sizes_, num_tokens);
  if (padded == 0) return {RuntimeMode::kEager, {num_tokens, num_reqs, uniform_decode}};
  if (uniform_decode) {
    const BatchDescriptor exact{padded, padded, true};
    if (full_.contains(exact)) return {RuntimeMode::kFull, exact};
  }
  const BatchDescriptor relaxed{padded, 0, false};
  if (full_.contains(relaxed)) return {RuntimeMode::kFull, relaxed};
  if (piecewise_.contains(relaxed)) return {RuntimeMode::kPiecewise, relaxed};
  return {RuntimeMode::kEager, {num_tokens, num_reqs, uniform_decode}};
}

}  // namespace freezeframe
