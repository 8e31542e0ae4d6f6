#pragma once
// bind_plan: every tensor of a memory plan as a view into its arena — weights in their shapes,
// program tensors at the plan's largest step, each layer's KV cache in its backend's shape and
// stride order (layers sharing a cache get the same view). Each view is checked against its
// placement as it is made, so an engine built on these views cannot read or write outside
// what the plan gave it.

#include <vector>

#include "freezeframe/core/tensor.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/memory/arena.h"

namespace freezeframe {

struct PlanViews {
  /// One per ModelProgram::weights, in its shape (undefined when the plan holds no weights).
  std::vector<TensorView> weights;
  /// One per ModelProgram::tensors: [max rows, width] (rows: max_num_batched_tokens or
  /// max_num_seqs); undefined for tensors the program never touches.
  std::vector<TensorView> tensors;
  /// One per layer: the backend's kv_cache_shape over the plan's blocks, strided by its
  /// kv_cache_stride_order; undefined for layers without a cache.
  std::vector<TensorView> kv_caches;
};

/// Views of `program`'s tensors (the program of `spec`, planned into `arena`'s plan). Throws
/// kOutOfMemory naming the tensor when one does not fit its placement, kNotFound when the plan
/// lacks one.
[[nodiscard]] PlanViews bind_plan(const EngineSpec& spec, const ModelProgram& program,
                                  const Arena& arena);

}  // namespace freezeframe
