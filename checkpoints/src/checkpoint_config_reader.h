#pragma once
// The parts of read_checkpoint_config: the config.json reader (hf_config.cpp), the GGUF
// metadata reader (gguf_config.cpp), and what both share (checkpoint_config.cpp): the
// architectures, and the checks of a config once read. Private to model/.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/checkpoints/checkpoint_config.h"

namespace freezeframe {
struct JsonValue;
}

namespace freezeframe::checkpoint_detail {

class JsonFields;

/// Sizes are positive 32-bit ints; the spec bounds them further.
inline constexpr std::int64_t kMaxSize = 2147483647;

/// The family of a config.json architecture ("LlamaForCausalLM") or model_type ("llama").
[[nodiscard]] std::optional<ModelFamily> hf_family(std::string_view architecture);
/// The family of a GGUF general.architecture ("llama", "qwen2").
[[nodiscard]] std::optional<ModelFamily> gguf_family(std::string_view architecture);
/// "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM" or "llama, qwen2".
[[nodiscard]] std::string supported_architectures(CheckpointFormat format);

/// Reads `file` (config.json text) into `config`, appending problems; `file` names it in them.
void read_hf_config(const std::string& file, CheckpointConfig& config,
                    std::vector<std::string>& problems);
/// Reads config.json's quantization_config (in `root`) into config.fp8: the fp8 schemes of
/// compressed-tensors and of the "fp8" method; any other method is a problem.
void read_quantization(JsonFields& j, const JsonValue& root, CheckpointConfig& config);
/// Reads DeepSeek-V2's latent attention and experts from config.json (`root`) into config.mla
/// and config.moe (and the head size they imply).
void read_deepseek_v2(JsonFields& j, const JsonValue& root, CheckpointConfig& config);
/// Reads a rope_scaling of type "yarn" (`map`, named `base` in problems) into
/// config.yarn_rope_scaling.
void read_yarn_scaling(JsonFields& j, const JsonValue& map, const std::string& base,
                       CheckpointConfig& config);
/// Reads generation_config.json (`file`): its eos_token_id (one id or a list) joins the
/// config's stop tokens.
void read_hf_generation_config(const std::string& file, CheckpointConfig& config,
                               std::vector<std::string>& problems);
/// Reads the GGUF file's metadata (and which tensors it holds) into `config`. Throws as
/// GgufFile::open does for a malformed file.
void read_gguf_config(const std::string& file, CheckpointConfig& config,
                      std::vector<std::string>& problems);

/// "file[:line:column]: field: message".
[[nodiscard]] std::string problem_text(std::string_view where, std::string_view field,
                                       std::string_view message);

}  // namespace freezeframe::checkpoint_detail
