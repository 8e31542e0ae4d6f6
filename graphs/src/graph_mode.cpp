#include "freezeframe/graphs/graph_mode.h"

#include "freezeframe/base/error.h"

namespace freezeframe {

std::string_view to_string(CudaGraphMode mode) {
  switch (mode) {
    case CudaGraphMode::kNone: return "none";
    case CudaGraphMode::kPiecewise: return "piecewise";
    case CudaGraphMode::kFull: return "full";
    case CudaGraphMode::kFullDecodeOnly: return "full_decode_only";
    case CudaGraphMode::kFullAndPiecewise: return "full_and_piecewise";
  }
  return "unknown";
}

std::optional<CudaGraphMode> parse_graph_mode(std::string_view name) {
  for (CudaGraphMode mode : {CudaGraphMode::kNone, CudaGraphMode::kPiecewise, CudaGraphMode::kFull,
                             CudaGraphMode::kFullDecodeOnly, CudaGraphMode::kFullAndPiecewise}) {
    if (to_string(mode) == name) return mode;
  }
  return std::nullopt;
}

CudaGraphMode lower_mode(CudaGraphMode requested, FullGraphScope scope) {
  switch (requested) {
    case CudaGraphMode::kNone:
    case CudaGraphMode::kPiecewise: return requested;
    case CudaGraphMode::kFull:
      if (scope == FullGraphScope::kAny) return requested;
      FF_CHECK(scope != FullGraphScope::kNone, ErrorCode::kUnsupported,
               "cuda graph mode 'full' needs full graphs, but an attention backend of this model "
               "allows none; use 'piecewise'");
      return CudaGraphMode::kFullAndPiecewise;  // full graphs for uniform decodes only
    case CudaGraphMode::kFullDecodeOnly:
      FF_CHECK(scope != FullGraphScope::kNone, ErrorCode::kUnsupported,
               "cuda graph mode 'full_decode_only' needs full graphs, but an attention backend "
               "of this model allows none; use 'piecewise'");
      return requested;
    case CudaGraphMode::kFullAndPiecewise:
      return scope == FullGraphScope::kNone ? CudaGraphMode::kPiecewise : requested;
  }
  FF_THROW(ErrorCode::kInternal, "unknown cuda graph mode ", static_cast<int>(requested));
}

}  // namespace freezeframe
