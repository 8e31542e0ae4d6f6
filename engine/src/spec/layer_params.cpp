#include "freezeframe/engine/spec/layer_params.h"

#include <cmath>
#include <string>

#include "freezeframe/engine/spec/tensor_parallel.h"

namespace freezeframe {

std::vector<float> alibi_slopes(int num_heads) {
  int closest = 1;
  while (closest * 2 <= num_heads) closest *= 2;
  std::vector<float> slopes;
  const double base = std::pow(2.0, -8.0 / closest);
  for (int i = 1; i <= closest; ++i) slopes.push_back(static_cast<float>(std::pow(base, i)));
  const double extra_base = std::pow(2.0, -4.0 / closest);  // 2^(−8 / (2·closest))
  for (int i = 1; static_cast<int>(slopes.size()) < num_heads; i += 2) {
    slopes.push_back(static_cast<float>(std::pow(extra_base, i)));
  }
  return slopes;
}

AttentionParams attention_params(const EngineSpec& spec, int layer, int tp_rank) {
  const ModelSpec& model = spec.model;
  const LayerSpec& l = model.layers.at(layer);
  AttentionParams params;
  // One rank's attention: its heads (with DCP, its group's gathered queries) and KV heads.
  const TpShard shard = tp_shard(spec);
  params.num_heads = shard.attention_heads;
  params.num_kv_heads = shard.kv_heads;
  params.head_size = model.head_size;
  params.scale = 1.0f / std::sqrt(static_cast<float>(model.head_size));
  params.kv_cache_dtype = spec.kv_cache_dtype();
  params.attn_type = l.attention_type;
  params.logits_soft_cap = l.logits_soft_cap;
  if (l.sliding_window > 0) params.sliding_window = l.sliding_window;
  if (l.alibi) {
    // The heads this rank attends: its own, or with DCP its group's (consecutive ranks).
    const std::vector<float> all = alibi_slopes(model.num_heads);
    const int dcp = spec.dcp.world_size;
    const auto first = static_cast<std::ptrdiff_t>(tp_rank / dcp * dcp * shard.query_heads);
    params.alibi_slopes.assign(all.begin() + first, all.begin() + first + shard.attention_heads);
  }
  if (l.kv_sharing_target >= 0) {
    params.kv_sharing_target_layer_name = "layers." + std::to_string(l.kv_sharing_target);
  }
  return params;
}

MlaParams mla_params(const EngineSpec& spec) {
  const ModelSpec& model = spec.model;
  const MlaSpec& mla = model.mla.value();
  MlaParams params;
  params.num_heads = tp_shard(spec).attention_heads;
  params.q_lora_rank = mla.q_lora_rank > 0 ? mla.q_lora_rank : model.hidden_size;
  params.kv_lora_rank = mla.kv_lora_rank;
  params.qk_nope_head_dim = mla.qk_nope_head_dim;
  params.qk_rope_head_dim = mla.qk_rope_head_dim;
  params.v_head_dim = mla.v_head_dim;
  params.scale = 1.0f / std::sqrt(static_cast<float>(mla.qk_nope_head_dim + mla.qk_rope_head_dim));
  params.rope_theta = model.rope_theta;
  params.kv_cache_dtype = spec.kv_cache_dtype();
  return params;
}

}  // namespace freezeframe
