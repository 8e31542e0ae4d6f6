#pragma once
// How much of a step a backend's metadata builder lets a full CUDA graph capture.

#include <string_view>

namespace freezeframe {

/// Ordered weakest to strongest; the weakest backend in a model bounds the graph mode.
enum class GraphSupport {
  kNever = 0,                     ///< attention must run eagerly (piecewise graphs at most)
  kUniformSingleTokenDecode = 1,  ///< full graphs only for batches of single-token decodes
  kUniformBatch = 2,              ///< full graphs for batches whose requests share a query length
  kAlways = 3,                    ///< full graphs for any batch, mixed prefill and decode
};

[[nodiscard]] std::string_view to_string(GraphSupport support);

}  // namespace freezeframe
