#include "freezeframe/engine/spec/tensor_parallel.h"

#include <algorithm>

#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {

TpShard tp_shard(const EngineSpec& spec) {
  const ModelSpec& model = spec.model;
  TpShard s;
  s.world = spec.tp.world_size;
  s.query_heads = model.num_heads / s.world;
  s.attention_heads = s.query_heads * spec.dcp.world_size;
  s.kv_heads = model.is_mla() ? 1 : std::max(1, model.num_kv_heads / s.world);
  // The padding rows are zero and their logits are dropped when the shards are gathered.
  s.padded_vocab = (std::int64_t(model.vocab_size) + s.world - 1) / s.world * s.world;
  s.vocab_rows = s.padded_vocab / s.world;
  return s;
}

}  // namespace freezeframe
