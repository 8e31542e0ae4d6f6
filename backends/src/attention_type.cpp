#include "freezeframe/backends/attention_type.h"

#include "freezeframe/backends/graph_support.h"

namespace freezeframe {

std::string_view to_string(AttentionType type) {
  switch (type) {
    case AttentionType::kDecoder: return "decoder";
    case AttentionType::kEncoder: return "encoder";
    case AttentionType::kEncoderOnly: return "encoder_only";
    case AttentionType::kEncoderDecoder: return "encoder_decoder";
  }
  return "unknown";
}

std::optional<AttentionType> parse_attention_type(std::string_view name) {
  for (AttentionType type : {AttentionType::kDecoder, AttentionType::kEncoder,
                             AttentionType::kEncoderOnly, AttentionType::kEncoderDecoder}) {
    if (to_string(type) == name) return type;
  }
  return std::nullopt;
}

bool uses_kv_cache(AttentionType type) {
  return type == AttentionType::kDecoder || type == AttentionType::kEncoderDecoder;
}

std::string_view to_string(GraphSupport support) {
  switch (support) {
    case GraphSupport::kNever: return "never";
    case GraphSupport::kUniformSingleTokenDecode: return "uniform_single_token_decode";
    case GraphSupport::kUniformBatch: return "uniform_batch";
    case GraphSupport::kAlways: return "always";
  }
  return "unknown";
}

}  // namespace freezeframe
