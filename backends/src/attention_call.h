#pragma once
// One forward's operands as the kernel policies of an impl receive them, already checked by
// the impl (shapes, dtypes, strides).

#include "freezeframe/backends/attention_layer.h"
#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/core/tensor.h"

namespace freezeframe {

struct AttentionCall {
  const AttentionLayer* layer = nullptr;
  const AttentionMetadata* md = nullptr;
  TensorView query;   ///< [rows, H, D]
  TensorView output;  ///< [rows, H, D]
  TensorView lse_ln;  ///< [rows, H] f32, or undefined
  /// Keys and values: the paged cache's halves [blocks, block_size, H_kv, D] (any strides), or,
  /// when `paged` is false, this step's rows [rows, H_kv, D] (encoder self-attention).
  TensorView k, v;
  bool paged = true;
  /// Causal (decoder) or bidirectional (encoder, cross-attention) attention.
  bool causal = true;
};

}  // namespace freezeframe
