#pragma once
// The four kinds of attention a layer can run, with the names specs use.

#include <optional>
#include <string_view>

namespace freezeframe {

enum class AttentionType {
  kDecoder,      ///< causal self-attention over the paged KV cache
  kEncoder,      ///< bidirectional self-attention of an encoder-decoder model's encoder; no cache
  kEncoderOnly,  ///< bidirectional self-attention of an encoder-only model; no cache
  kEncoderDecoder,  ///< cross-attention: decoder queries over the encoder's K/V in the cache
};

/// "decoder", "encoder", "encoder_only", "encoder_decoder".
[[nodiscard]] std::string_view to_string(AttentionType type);
[[nodiscard]] std::optional<AttentionType> parse_attention_type(std::string_view name);
/// Whether this type reads and writes the paged KV cache.
[[nodiscard]] bool uses_kv_cache(AttentionType type);

}  // namespace freezeframe
