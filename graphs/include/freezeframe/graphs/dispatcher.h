#pragma once
// The dispatcher: the one authority on which graphs exist and which one a batch runs. It pads
// a batch's token count up to the smallest capture size and looks for, in order, a full graph
// with the exact key, a full graph with the relaxed key (any batch of that size), a piecewise
// graph, and otherwise runs eagerly (also above the largest capture size).

#include <span>
#include <unordered_set>
#include <vector>

#include "freezeframe/graphs/batch_descriptor.h"
#include "freezeframe/graphs/graph_mode.h"

namespace freezeframe {

enum class RuntimeMode { kEager, kPiecewise, kFull };
[[nodiscard]] std::string_view to_string(RuntimeMode mode);

struct Dispatch {
  RuntimeMode mode = RuntimeMode::kEager;
  BatchDescriptor descriptor;  ///< padded key (eager: the batch as it is)
};

class Dispatcher {
 public:
  /// `mode` already lowered (lower_mode); `capture_sizes` ascending, positive, unique.
  /// Uniform-decode full graphs exist only for sizes up to `max_num_reqs` (a batch of N
  /// single-token decodes has N requests); 0 = no bound.
  Dispatcher(CudaGraphMode mode, std::vector<int> capture_sizes, int max_num_reqs = 0);

  [[nodiscard]] CudaGraphMode mode() const { return mode_; }
  [[nodiscard]] std::span<const int> capture_sizes() const { return sizes_; }
  /// Keys to capture, full ones first, each list largest first (capture order).
  [[nodiscard]] const std::vector<BatchDescriptor>& full_keys() const { return full_order_; }
  [[nodiscard]] const std::vector<BatchDescriptor>& piecewise_keys() const {
    return piecewise_order_;
  }

  /// Where a batch of `num_tokens` tokens over `num_reqs` requests runs; `uniform_decode`
  /// when every request is a single-token decode (then num_tokens == num_reqs).
  [[nodiscard]] Dispatch dispatch(int num_tokens, int num_reqs, bool uniform_decode) const;

 private:
  CudaGraphMode mode_;
  std::vector<int> sizes_;
  std::unordered_set<BatchDescriptor, BatchDescriptorHash> full_, piecewise_;
  std::vector<BatchDescriptor> full_order_, piecewise_order_;
};

}  // namespace freezeframe
