// The GGUF weight source: llama.cpp's tensor names mapped to Hugging Face's, and the q and k
// projections of Llama-family files read back in Hugging Face's row order (Note [GGUF rotary
// rows] in weight_source.h). Tensors of other names (rope_freqs.weight, ...) are left out.

#include <charconv>
#include <optional>
#include <utility>

#include "freezeframe/checkpoints/gguf_file.h"
#include "mapped_weights.h"
#include "weight_sources.h"

namespace freezeframe {
namespace {

struct NamePair {
  std::string_view gguf;
  std::string_view hf;
};

constexpr NamePair kModelNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// A layer's tensors: "blk.N." + gguf ↔ "model.layers.N." + hf.
constexpr NamePair kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

/// `name` mapped from GGUF's naming to Hugging Face's (to_hf) or back: whole names through
/// kModelNames, layer tensors "<prefix>N.<suffix>" through kLayerNames; nullopt for others.
std::optional<std::string> map_name(std::string_view name, bool to_hf) {
  for (const NamePair& p : kModelNames) {
    if (name == (to_hf ? p.gguf : p.hf)) return std::string(to_hf ? p.hf : p.gguf);
  }
  const std::string_view from_prefix = to_hf ? "blk." : "model.layers.";
  if (!name.starts_with(from_prefix)) return std::nullopt;
  name.remove_prefix(from_prefix.size());
  const std::size_t dot = name.find('.');
  // The layer: decimal digits without a leading zero ("blk.07." names no tensor).
  if (dot == std::string_view::npos || dot == 0 || (name[0] == '0' && dot > 1)) return std::nullopt;
  int layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || end != name.data() + dot || layer < 0) return std::nullopt;
  const std::string_view suffix = name.substr(dot + 1);
  for (const NamePair& p : kLayerNames) {
    if (suffix == (to_hf ? p.gguf : p.hf)) {
      return std::string(to_hf ? "model.layers." : "blk.") + std::to_string(layer) + "." +
             std::string(to_hf ? p.hf : p.gguf);
    }
  }
  return std::nullopt;
}

bool readable_type(std::uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kF32:
    case GgufType::kF16:
    case GgufType::kBF16:
    case GgufType::kQ8_0:
    case GgufType::kQ4_0:
    case GgufType::kQ4_1: return true;
  }
  return false;
}

class GgufWeights final : public MappedWeights {
 public:
  explicit GgufWeights(const CheckpointConfig& config)
      : MappedWeights(config.path), file_(GgufFile::open(config.path)) {
    // llama.cpp's converter permutes q and k for every Llama-family model (Mistral's files
    // are "llama" too); Qwen2 keeps Hugging Face's rotate-half layout and is stored as is.
    const bool permuted = config.family != ModelFamily::kQwen2;
    for (const GgufTensor& t : file_.tensors()) {
      const std::optional<std::string> hf = map_name(t.name, true);
      if (!hf) continue;
      WeightTensor w;
      w.name = *hf;
      w.stored_name = t.name;
      w.file = file_.path();
      w.type = gguf_type_name(t.type);
      w.shape = t.shape();
      if (!readable_type(t.type)) {
        w.unreadable = w.type + " is not read; F32, F16, BF16, Q8_0, Q4_0 and Q4_1 are";
      }
      Stored stored;
      stored.bytes = file_.bytes(t);
      stored.codec = Codec::kGgml;
      stored.ggml_type = t.type;
      const bool q = t.name.ends_with(".attn_q.weight") || t.name.ends_with(".attn_q.bias");
      const bool k = t.name.ends_with(".attn_k.weight") || t.name.ends_with(".attn_k.bias");
      if (permuted && (q || k)) {
        const std::int64_t heads = q ? config.num_heads : config.num_kv_heads;
        const std::int64_t rows = w.rows();
        if (heads <= 0 || rows % heads != 0 || (rows / heads) % 2 != 0) {
          if (w.unreadable.empty()) {
            w.unreadable = "its " + std::to_string(rows) + " rows are not " +
                           std::to_string(heads) + " heads of an even size, so the rotary " +
                           "order llama.cpp stores them in cannot be undone";
          }
        } else {
          stored.rotary_head_size = rows / heads;
        }
      }
      add(std::move(w), stored);
    }
  }

  [[nodiscard]] std::string_view format() const override { return "GGUF"; }
  [[nodiscard]] std::string stored_name(std::string_view name) const override {
    return map_name(name, false).value_or(std::string(name));
  }

 private:
  GgufFile file_;  // the mapped file the tensors' bytes lie in
};

}  // namespace

std::unique_ptr<WeightSource> open_gguf_weights(const CheckpointConfig& config) {
  return std::make_unique<GgufWeights>(config);
}

}  // namespace freezeframe
