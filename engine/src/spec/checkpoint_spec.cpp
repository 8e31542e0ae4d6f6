#include "freezeframe/engine/spec/checkpoint_spec.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "freezeframe/backends/registry.h"
#include "freezeframe/checkpoints/checkpoint_config.h"

namespace freezeframe {
namespace {

/// `text` as a YAML double-quoted scalar (escapes for quotes, backslashes and control bytes).
std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      (out += '\\') += c;
    } else if (u < 0x20 || u == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", u);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out += '"';
}

/// The fast backend ("paged") where it runs the model's head size, else the reference one;
/// the MLA one for latent attention. A config that cannot be read is left to the spec to
/// refuse, naming its problems.
std::string default_backend(const std::string& checkpoint) {
  std::vector<std::string> problems;
  const std::optional<CheckpointConfig> config = read_checkpoint_config(checkpoint, problems);
  if (config && config->mla) return "reference_mla";
  const BackendRegistry& registry = BackendRegistry::global();
  if (config && registry.contains("paged") &&
      registry.get("paged").supports_head_size(config->head_size)) {
    return "paged";
  }
  return "reference";
}

}  // namespace

std::string checkpoint_spec_text(const std::string& checkpoint,
                                 const CheckpointSpecOptions& options) {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(checkpoint, ec);
  if (ec) path = checkpoint;
  const std::string backend =
      options.backend.empty() ? default_backend(path.string()) : options.backend;
  std::string text =
      "model:\n  checkpoint: " + yaml_quoted(path.lexically_normal().string()) +
      "\n  builtin_weights: false\n" +
      (options.quantization.empty()
           ? std::string()
           : "  quantization: " + yaml_quoted(options.quantization) + "\n") +
      "  attention:\n    backend: " + yaml_quoted(backend) +
      "\ncache:\n  memory_budget: " + yaml_quoted(options.memory_budget) +
      "\nscheduler:\n  max_num_seqs: " + std::to_string(options.max_num_seqs) +
      "\n  max_num_batched_tokens: " + std::to_string(options.max_num_batched_tokens) + "\n";
  if (options.max_model_len > 0) {
    text += "  max_model_len: " + std::to_string(options.max_model_len) + "\n";
  }
  return text + "cuda_graphs:\n  mode: full_and_piecewise\n";
}

EngineSpec spec_for_checkpoint(const std::string& checkpoint,
                               const CheckpointSpecOptions& options) {
  return parse_written_spec(checkpoint_spec_text(checkpoint, options), checkpoint);
}

}  // namespace freezeframe
