// Every layer of the model resolved (defaults, the window pattern, then overrides in order) and
// checked against its backend: MLA or not, cache dtype, head size, KV sharing, and whatever
// else the backend's impl refuses.

#include <string>
#include <vector>

#include "freezeframe/backends/backend.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/spec/layer_params.h"
#include "spec/spec_parser.h"

namespace freezeframe::spec_detail {

void SpecParser::flush_layer_problems() {
  for (const auto& key : layer_problem_order_) {
    const std::vector<int>& layers = layer_problems_[key];
    // "layer 3", or runs such as "layers 0..3, 7".
    std::string who = layers.size() == 1 ? "layer " : "layers ";
    for (std::size_t i = 0; i < layers.size();) {
      std::size_t j = i;
      while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
      who += (i ? ", " : "") + std::to_string(layers[i]);
      if (j > i) who += ".." + std::to_string(layers[j]);
      i = j + 1;
    }
    problem(key.first, who + ": " + key.second);
  }
}

void SpecParser::check_layers() {
  ModelSpec& model = spec_.model;
  const int n = model.num_layers;
  model.num_kv_heads = kv_heads_given_.value_or(model.num_heads);
  if (model.is_mla()) model.num_kv_heads = 1;  // one shared latent "head"
  if (!model.is_mla() && model.num_heads % model.num_kv_heads != 0) {
    model_ok_ = false;
    problem("model.num_kv_heads", "model.num_heads " + std::to_string(model.num_heads) +
                                      " is not divisible by num_kv_heads " +
                                      std::to_string(model.num_kv_heads));
  }
  if (head_size_given_) {
    model.head_size = *head_size_given_;
  } else if (model.is_mla()) {
    model.head_size = model.mla->qk_nope_head_dim + model.mla->qk_rope_head_dim;
  } else if (model.hidden_size % model.num_heads != 0) {
    problem("model.head_size",
            "is not given and model.hidden_size " + std::to_string(model.hidden_size) +
                " is not divisible by num_heads " + std::to_string(model.num_heads));
    return;
  } else {
    model.head_size = model.hidden_size / model.num_heads;
  }

  // Resolve every layer: model-wide defaults, the window pattern, then overrides in order.
  model.layers.assign(n, LayerSpec{});
  std::vector<std::string> layer_path(n, "model.attention");
  std::vector<bool> backend_named(n, defaults_.backend.has_value());
  for (int l = 0; l < n; ++l) {
    LayerSpec& layer = model.layers[l];
    layer.backend = defaults_.backend.value_or("");
    layer.attention_type = defaults_.type.value_or(AttentionType::kDecoder);
    layer.sliding_window = defaults_.sliding_window.value_or(0);
    if (!window_pattern_.empty()) {
      layer.sliding_window = window_pattern_[l % window_pattern_.size()];
    }
    layer.logits_soft_cap = defaults_.logits_soft_cap.value_or(0.0f);
    layer.alibi = defaults_.alibi.value_or(false);
    layer.mlp = defaults_.mlp.value_or(checkpoint_mlp(l));
    layer.intermediate_size = model.intermediate_size;
  }
  for (std::size_t i = 0; i < overrides_.size(); ++i) {
    const auto& [indices, o] = overrides_[i];
    for (const int l : indices) {
      if (l < 0 || l >= n) continue;
      LayerSpec& layer = model.layers[l];
      layer_path[l] = override_paths_[i];
      if (o.type) layer.attention_type = *o.type;
      if (o.backend) {
        layer.backend = *o.backend;
        backend_named[l] = true;
      }
      if (o.sliding_window) layer.sliding_window = *o.sliding_window;
      if (o.logits_soft_cap) layer.logits_soft_cap = *o.logits_soft_cap;
      if (o.alibi) layer.alibi = *o.alibi;
      if (o.kv_sharing_target) layer.kv_sharing_target = *o.kv_sharing_target;
      if (o.mlp) layer.mlp = *o.mlp;
      if (o.intermediate_size) layer.intermediate_size = *o.intermediate_size;
    }
  }

  if (!model_ok_) return;
  for (int l = 0; l < n; ++l) {
    LayerSpec& layer = model.layers[l];
    if (!backend_named[l]) layer.backend = default_backend(l);
    // An alias (an older name) is kept as the backend's own name.
    if (registry_.contains(layer.backend)) layer.backend = registry_.get(layer.backend).name();
  }
  bool reported_intermediate = false, reported_moe = false;
  for (int l = 0; l < n; ++l) {
    const LayerSpec& layer = model.layers[l];
    if (layer.mlp == MlpKind::kMoe && !model.moe && !reported_moe) {
      problem(layer_path[l] == "model.attention" ? "model.mlp" : layer_path[l] + ".mlp",
              "moe needs the experts' sizes: add a model.moe section (num_experts, "
              "experts_per_token, intermediate_size, num_shared_experts)");
      reported_moe = true;
    }
    if (layer.mlp == MlpKind::kGatedSilu && layer.intermediate_size <= 0 &&
        !reported_intermediate) {
      problem("model.intermediate_size", "is required: layer " + std::to_string(l) +
                                             " has a gated_silu MLP (set mlp: none to plan "
                                             "without one)");
      reported_intermediate = true;
    }
    check_layer(l, layer_path[l]);
  }
  flush_layer_problems();
}

std::string SpecParser::default_backend(int l) const {
  const ModelSpec& model = spec_.model;
  if (model.is_mla()) return "reference_mla";
  constexpr std::string_view kFast = "paged", kReference = "reference";
  if (!registry_.contains(kFast)) return std::string(kReference);
  const AttentionBackend& fast = registry_.get(kFast);
  if (!fast.supports_kv_cache_dtype(spec_.kv_cache_dtype()) ||
      !fast.supports_head_size(model.head_size)) {
    return std::string(kReference);
  }
  try {
    (void)fast.make_impl(attention_params(spec_, l),
                         DcpGroup{spec_.dcp.world_size, 0, spec_.dcp.interleave_size});
  } catch (const Error&) {
    return std::string(kReference);  // a feature it lacks: the reference backend has them all
  }
  return std::string(kFast);
}

void SpecParser::check_layer(int l, const std::string& path) {
  const ModelSpec& model = spec_.model;
  const LayerSpec& layer = model.layers[l];
  const std::string who = "layer " + std::to_string(l);
  const std::string backend_path = join_path(path, "backend");
  if (!registry_.contains(layer.backend)) {
    // Only a default can get here (a name given in the spec was checked where it was read).
    layer_problem(backend_path, l,
                  "the default backend '" + layer.backend +
                      "' is not registered; name one of the registered ones");
    return;
  }
  const AttentionBackend& backend = registry_.get(layer.backend);
  if (backend.is_mla() != model.is_mla()) {
    layer_problem(backend_path, l,
                  "backend '" + layer.backend + "' is " +
                      (backend.is_mla() ? "an MLA backend but the model has no mla section"
                                        : "not an MLA backend but the model uses MLA"));
    return;
  }
  const DType cache_dtype = spec_.kv_cache_dtype();
  if (!backend.supports_kv_cache_dtype(cache_dtype)) {
    layer_problem("cache.dtype", l,
                  "backend '" + layer.backend + "' cannot keep a " +
                      std::string(name_of(cache_dtype)) + " KV cache");
    return;
  }
  const int head =
      model.is_mla() ? model.mla->kv_lora_rank + model.mla->qk_rope_head_dim : model.head_size;
  if (!backend.supports_head_size(head)) {
    std::string list;
    for (int s : backend.supported_head_sizes()) {
      (list += list.empty() ? "" : ", ") += std::to_string(s);
    }
    // A size the spec did not write (a checkpoint's) is pointed at through the backend named.
    const char* size_path = model.is_mla() ? "model.mla.kv_lora_rank" : "model.head_size";
    layer_problem(
        spec_.locations.contains(size_path) ? std::string(size_path) : backend_path, l,
        "backend '" + layer.backend + "' cannot run " +
            (model.is_mla() ? "latent size (kv_lora_rank + qk_rope_head_dim) " : "head size ") +
            std::to_string(head) + "; it supports " + list);
    return;
  }
  if (layer.kv_sharing_target >= 0) {
    const int t = layer.kv_sharing_target;
    const std::string sharing_path = join_path(path, "kv_sharing_target");
    if (t >= l) {
      problem(sharing_path, who + " shares the KV cache of layer " + std::to_string(t) +
                                ", which is not an earlier layer");
      return;
    }
    const LayerSpec& target = model.layers[t];
    if (target.kv_sharing_target >= 0) {
      problem(sharing_path, who + " shares the KV cache of layer " + std::to_string(t) +
                                ", which itself shares layer " +
                                std::to_string(target.kv_sharing_target) + "; name that one");
      return;
    }
    if (target.backend != layer.backend || !uses_kv_cache(target.attention_type)) {
      problem(sharing_path, who + " shares the KV cache of layer " + std::to_string(t) +
                                ", which has no cache in backend '" + layer.backend + "'");
      return;
    }
  }
  if (model.is_mla()) return;  // MLA impls need weights to be built; checked above
  const AttentionParams params = attention_params(spec_, l);
  try {
    (void)backend.make_impl(params, DcpGroup{spec_.dcp.world_size, 0, spec_.dcp.interleave_size});
  } catch (const Error& e) {
    layer_problem(path, l, "backend '" + layer.backend + "' refuses this layer: " + e.message());
  }
}

}  // namespace freezeframe::spec_detail
