#include "freezeframe/engine/spec/tensor_parallel.h"

#include <algorithm>
#include <string>

#include "freezeframe/base/error.h"
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

WeightShard weight_shard(const EngineSpec& spec, std::string_view name, int tp_rank) {
  const ModelSpec& model = spec.model;
  const TpShard s = tp_shard(spec);
  FF_CHECK(tp_rank >= 0 && tp_rank < s.world, ErrorCode::kInvalidArgument, "tensor-parallel rank ",
           tp_rank, " is not one of tp.world_size ", s.world);
  if (s.world == 1) return {};
  // The suffix after "layers.N." (the layer's own MLP width), or the whole name.
  int layer = -1;
  std::string_view suffix = name;
  if (name.starts_with("layers.")) {
    const std::size_t dot = name.find('.', 7);
    layer = std::stoi(std::string(name.substr(7, dot - 7)));
    suffix = name.substr(dot + 1);
  }
  const std::int64_t t = s.world, r = tp_rank;
  // `local` elements per rank along `axis`, rank r's starting at r · local.
  auto split = [&](int axis, std::int64_t local) {
    return WeightShard{axis, r * local, local * t};
  };
  const bool mla = model.is_mla();
  if (suffix == "embed_tokens" || suffix == "lm_head") {
    return {0, r * s.vocab_rows, model.vocab_size};
  }
  // An MLA impl projects its queries and up-projects the latent itself: under DCP, where it
  // attends its whole group's heads (attention_heads, the group's consecutive ranks' heads), it
  // holds their rows; the merge hands each rank back its own heads for o_proj.
  auto mla_heads = [&](std::int64_t per_head) {
    const std::int64_t d = spec.dcp.world_size;
    return WeightShard{0, (r / d) * s.attention_heads * per_head, t * s.query_heads * per_head};
  };
  if (mla && (suffix == "self_attn.q_proj" || suffix == "self_attn.q_b_proj")) {
    return mla_heads(model.mla->qk_nope_head_dim + model.mla->qk_rope_head_dim);
  }
  if (mla && suffix == "self_attn.kv_b_proj") {
    return mla_heads(model.mla->qk_nope_head_dim + model.mla->v_head_dim);
  }
  if (suffix == "self_attn.q_proj" || suffix == "self_attn.q_proj.bias") {
    return split(0, s.query_heads * model.head_size);
  }
  if (suffix == "self_attn.o_proj") {
    return split(1, s.query_heads * (mla ? model.mla->v_head_dim : model.head_size));
  }
  if (!mla && (suffix == "self_attn.k_proj" || suffix == "self_attn.v_proj" ||
               suffix == "self_attn.k_proj.bias" || suffix == "self_attn.v_proj.bias")) {
    const std::int64_t d = model.head_size, kv = model.num_kv_heads;
    // Over more ranks than KV heads each head is kept by T / kv consecutive ranks.
    const std::int64_t first_head = t <= kv ? r * (kv / t) : r / (t / kv);
    return {0, first_head * d, kv * d};
  }
  if (layer >= 0 && (suffix == "mlp.gate_proj" || suffix == "mlp.up_proj")) {
    return split(0, s.intermediate(model.layers[layer].intermediate_size));
  }
  if (layer >= 0 && suffix == "mlp.down_proj") {
    return split(1, s.intermediate(model.layers[layer].intermediate_size));
  }
  // A MoE layer's experts split their width as a dense MLP does; its router is whole.
  if (layer >= 0 && model.moe &&
      (suffix.starts_with("mlp.experts.") || suffix.starts_with("mlp.shared_experts."))) {
    const bool shared = suffix.starts_with("mlp.shared_experts.");
    const std::int64_t width =
        (shared ? model.moe->num_shared_experts : 1) * std::int64_t(model.moe->intermediate_size);
    if (suffix.ends_with(".gate_proj") || suffix.ends_with(".up_proj")) {
      return split(0, s.intermediate(width));
    }
    if (suffix.ends_with(".down_proj")) return split(1, s.intermediate(width));
  }
  return {};  // norms and MLA's compressions (q_a, kv_a): every rank holds them whole
}

}  // namespace freezeframe
