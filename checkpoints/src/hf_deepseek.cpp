// DeepSeek-V2's part of a config.json: multi-head latent attention, the mixture of experts and
// YaRN RoPE scaling. Defaults are those of transformers' DeepseekV2Config; what the model
// program would compute differently from transformers (and from DeepSeek's own modelling code)
// is refused by field: routers other than a softmax, norm_topk_prob, experts on every n-th
// layer only.

#include <cstdint>
#include <optional>
#include <string>

#include "checkpoint_config_reader.h"
#include "freezeframe/base/printable.h"
#include "json_fields.h"

namespace freezeframe::checkpoint_detail {
namespace {

/// The integer at `key`, or `fallback` when the config does not give it; where it does, it is
/// the origin of the spec's model.`spec_field`.
int size_or(JsonFields& j, const JsonValue& root, std::string_view key, int fallback,
            std::string_view spec_field, std::int64_t min = 1) {
  const JsonValue* node = JsonFields::get(&root, key);
  if (node == nullptr) return fallback;
  j.origin(spec_field, node, key);
  return static_cast<int>(j.integer_value(*node, key, min, kMaxSize).value_or(fallback));
}

void read_mla(JsonFields& j, const JsonValue& root, CheckpointConfig& c) {
  CheckpointMla m;
  m.kv_lora_rank = size_or(j, root, "kv_lora_rank", 512, "mla.kv_lora_rank");
  // Absent: transformers' 1536; null: the query is not compressed (V2-Lite).
  const JsonValue* q_lora = root.find("q_lora_rank");
  m.q_lora_rank = q_lora != nullptr && q_lora->is_null()
                      ? 0
                      : size_or(j, root, "q_lora_rank", 1536, "mla.q_lora_rank");
  m.qk_nope_head_dim = size_or(j, root, "qk_nope_head_dim", 128, "mla.qk_nope_head_dim");
  m.qk_rope_head_dim = size_or(j, root, "qk_rope_head_dim", 64, "mla.qk_rope_head_dim");
  m.v_head_dim = size_or(j, root, "v_head_dim", 128, "mla.v_head_dim");
  if (m.qk_rope_head_dim % 2 != 0) {
    j.problem(JsonFields::get(&root, "qk_rope_head_dim"), "qk_rope_head_dim",
              "must be even (RoPE rotates pairs), got " + std::to_string(m.qk_rope_head_dim));
  }
  // The query-key head is the rotary and the non-rotary part side by side; transformers'
  // head_dim (the rotary part) is not the spec's head size.
  c.head_size = m.qk_nope_head_dim + m.qk_rope_head_dim;
  j.origin("head_size", JsonFields::get(&root, "qk_nope_head_dim"),
           "qk_nope_head_dim + qk_rope_head_dim");
  c.mla = m;
}

/// A problem at `key` when the config gives it another value than the one the program
/// computes with; `shown` is that value as JSON writes it.
template <class T>
void require(JsonFields& j, const JsonValue& root, std::string_view key, std::optional<T> value,
             T supported, std::string_view shown, std::string_view why) {
  if (!value || *value == supported) return;
  j.problem(JsonFields::get(&root, key), key,
            j.kind_of(*JsonFields::get(&root, key)) + " is not supported (" + std::string(why) +
                "); supported: " + std::string(shown));
}

void read_moe(JsonFields& j, const JsonValue& root, CheckpointConfig& c) {
  CheckpointMoe e;
  e.num_experts = size_or(j, root, "n_routed_experts", 64, "moe.num_experts");
  const JsonValue* k = JsonFields::get(&root, "num_experts_per_tok");
  if (k == nullptr) {
    j.missing(&root, "num_experts_per_tok");
  } else {
    j.origin("moe.experts_per_token", k, "num_experts_per_tok");
    e.experts_per_token =
        static_cast<int>(j.integer_value(*k, "num_experts_per_tok", 1, kMaxSize).value_or(0));
  }
  e.intermediate_size = size_or(j, root, "moe_intermediate_size", 1407, "moe.intermediate_size");
  const JsonValue* shared = root.find("n_shared_experts");
  e.num_shared_experts = shared != nullptr && shared->is_null()
                             ? 0
                             : size_or(j, root, "n_shared_experts", 2, "moe.num_shared_experts", 0);
  e.first_dense_layers = size_or(j, root, "first_k_dense_replace", 0, "moe.first_dense_layers", 0);
  if (auto f = j.positive(&root, "routed_scaling_factor", "routed_scaling_factor", false)) {
    e.routed_scaling_factor = *f;
  }
  if (e.experts_per_token > e.num_experts) {
    j.problem(k, "num_experts_per_tok",
              "is " + std::to_string(e.experts_per_token) + ", more than the " +
                  std::to_string(e.num_experts) + " experts (n_routed_experts)");
  }
  if (c.num_layers > 0 && e.first_dense_layers > c.num_layers) {
    j.problem(JsonFields::get(&root, "first_k_dense_replace"), "first_k_dense_replace",
              "is " + std::to_string(e.first_dense_layers) + ", more than the " +
                  std::to_string(c.num_layers) + " layers");
  }
  const std::optional<std::string> method = j.string(&root, "topk_method", "topk_method");
  if (method && *method == "group_limited_greedy") {
    const JsonValue* groups = JsonFields::get(&root, "n_group");
    const JsonValue* top = JsonFields::get(&root, "topk_group");
    if (groups == nullptr) j.missing(&root, "n_group");
    if (top == nullptr) j.missing(&root, "topk_group");
    if (groups != nullptr && top != nullptr) {
      e.num_groups = static_cast<int>(j.integer_value(*groups, "n_group", 1, kMaxSize).value_or(1));
      e.top_groups =
          static_cast<int>(j.integer_value(*top, "topk_group", 1, e.num_groups).value_or(1));
      if (e.num_experts % e.num_groups != 0) {
        j.problem(groups, "n_group",
                  std::to_string(e.num_groups) + " groups do not divide the " +
                      std::to_string(e.num_experts) + " experts (n_routed_experts)");
      } else if (e.experts_per_token > e.top_groups * (e.num_experts / e.num_groups)) {
        j.problem(top, "topk_group",
                  std::to_string(e.top_groups) + " groups of " +
                      std::to_string(e.num_experts / e.num_groups) + " experts hold fewer than " +
                      "the " + std::to_string(e.experts_per_token) +
                      " a token takes (num_experts_per_tok)");
      }
    }
  } else if (method && *method != "greedy") {
    j.problem(JsonFields::get(&root, "topk_method"), "topk_method",
              quote(*method) + " is not supported; supported: greedy, group_limited_greedy");
  }
  require(j, root, "scoring_func", j.string(&root, "scoring_func", "scoring_func"),
          std::string("softmax"), "softmax", "the router takes the softmax of its logits");
  require(j, root, "norm_topk_prob", j.boolean(&root, "norm_topk_prob", "norm_topk_prob"), false,
          "false",
          "the chosen experts' weights are not renormalised, as transformers computes them");
  const JsonValue* freq = JsonFields::get(&root, "moe_layer_freq");
  require(j, root, "moe_layer_freq",
          freq ? j.integer_value(*freq, "moe_layer_freq", 1, kMaxSize) : std::nullopt,
          std::int64_t{1}, "1",
          "every layer from first_k_dense_replace on has the experts, as transformers builds them");
  c.moe = e;
}

}  // namespace

void read_deepseek_v2(JsonFields& j, const JsonValue& root, CheckpointConfig& c) {
  read_mla(j, root, c);
  read_moe(j, root, c);
  require(j, root, "attention_bias", j.boolean(&root, "attention_bias", "attention_bias"), false,
          "false", "the latent projections have no bias");
  require(j, root, "mlp_bias", j.boolean(&root, "mlp_bias", "mlp_bias"), false, "false",
          "the MLPs and experts have no bias");
}

void read_yarn_scaling(JsonFields& j, const JsonValue& map, const std::string& base,
                       CheckpointConfig& c) {
  YarnRopeScaling y;
  const auto factor = j.positive(&map, "factor", base + ".factor", true);
  const auto original = j.integer(&map, "original_max_position_embeddings",
                                  base + ".original_max_position_embeddings", true);
  if (!factor || !original) return;
  y.factor = *factor;
  y.original_max_position_embeddings = *original;
  if (auto v = j.positive(&map, "beta_fast", base + ".beta_fast", false)) y.beta_fast = *v;
  if (auto v = j.positive(&map, "beta_slow", base + ".beta_slow", false)) y.beta_slow = *v;
  if (auto v = j.positive(&map, "mscale", base + ".mscale", false)) y.mscale = *v;
  if (auto v = j.positive(&map, "mscale_all_dim", base + ".mscale_all_dim", false)) {
    y.mscale_all_dim = *v;
  }
  // transformers' other YaRN knobs change the arithmetic; the published DeepSeek-V2 configs
  // set none of them.
  for (const char* key : {"attention_factor", "truncate", "partial_rotary_factor"}) {
    if (JsonFields::get(&map, key) != nullptr) {
      j.problem(JsonFields::get(&map, key), base + "." + key,
                "is not supported with YaRN scaling (remove it to use its default)");
    }
  }
  c.yarn_rope_scaling = y;
}

}  // namespace freezeframe::checkpoint_detail
