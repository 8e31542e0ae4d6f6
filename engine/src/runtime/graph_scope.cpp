#include "freezeframe/engine/runtime/graph_scope.h"

#include <algorithm>

#include "freezeframe/backends/registry.h"

namespace freezeframe {

FullGraphScope full_graph_scope(GraphSupport support) {
  switch (support) {
    case GraphSupport::kNever: return FullGraphScope::kNone;
    case GraphSupport::kUniformSingleTokenDecode: return FullGraphScope::kUniformSingleTokenDecode;
    case GraphSupport::kUniformBatch: return FullGraphScope::kUniformBatch;
    case GraphSupport::kAlways: return FullGraphScope::kAny;
  }
  return FullGraphScope::kNone;
}

FullGraphScope full_graph_scope(const EngineSpec& spec) {
  FullGraphScope scope = FullGraphScope::kAny;
  for (const LayerSpec& layer : spec.model.layers) {
    scope = std::min(scope, full_graph_scope(spec.registry->get(layer.backend).graph_support()));
  }
  return scope;
}

CudaGraphMode effective_graph_mode(const EngineSpec& spec) {
  return lower_mode(spec.cuda_graphs.mode, full_graph_scope(spec));
}

}  // namespace freezeframe
