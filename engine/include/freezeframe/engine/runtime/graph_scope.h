#pragma once
// Where attention backends meet the graph layer: the weakest backend of a model decides which
// batches a full graph may cover, and so the mode the engine actually runs.

#include "freezeframe/backends/graph_support.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/graphs/graph_mode.h"

namespace freezeframe {

/// The graph layer's name for a backend builder's support level.
[[nodiscard]] FullGraphScope full_graph_scope(GraphSupport support);
/// The narrowest scope over every layer's backend of `spec`.
[[nodiscard]] FullGraphScope full_graph_scope(const EngineSpec& spec);
/// The spec's graph mode lowered by its weakest backend (lower_mode); throws kUnsupported
/// when the spec asks for full graphs only and a backend allows none.
[[nodiscard]] CudaGraphMode effective_graph_mode(const EngineSpec& spec);

}  // namespace freezeframe
