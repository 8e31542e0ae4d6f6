#pragma once
// CUDA graph modes (vLLM's CUDAGraphMode) and how the weakest participant lowers them.

#include <optional>
#include <string_view>

namespace freezeframe {

enum class CudaGraphMode {
  kNone,              ///< everything eager
  kPiecewise,         ///< graphs between attention calls, attention eager
  kFull,              ///< the whole step in one graph, for every batch
  kFullDecodeOnly,    ///< full graphs for uniform-decode batches, eager otherwise
  kFullAndPiecewise,  ///< full for uniform-decode batches, piecewise otherwise
};

/// "none", "piecewise", "full", "full_decode_only", "full_and_piecewise".
[[nodiscard]] std::string_view to_string(CudaGraphMode mode);
[[nodiscard]] std::optional<CudaGraphMode> parse_graph_mode(std::string_view name);

/// Which batches a full graph may cover, as far as the code inside it allows (the engine
/// derives it from the weakest attention backend; graphs/ needs no more than this).
enum class FullGraphScope {
  kNone,                      ///< no full graphs at all
  kUniformSingleTokenDecode,  ///< only batches of single-token decodes
  kUniformBatch,              ///< only batches whose requests share a query length
  kAny,                       ///< any batch
};

/// The mode to run when `requested` meets code that allows full graphs for `scope` only:
/// full for every batch narrows to full for uniform decodes (plus piecewise), and full modes
/// with no full scope fall back to piecewise. Throws kUnsupported when `requested` asks for
/// full graphs only (full, full_decode_only) and the scope allows none.
[[nodiscard]] CudaGraphMode lower_mode(CudaGraphMode requested, FullGraphScope scope);

}  // namespace freezeframe
