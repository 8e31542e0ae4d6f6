#include "freezeframe/engine/model/checkpoint_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

// Problems listed in one refusal; the rest are counted.
constexpr std::size_t kMaxListed = 16;

}  // namespace

std::string hf_weight_name(const ProgramWeight& weight) {
  if (weight.name == "lm_head") return "lm_head.weight";
  const std::string_view bias = ".bias";
  if (weight.name.size() > bias.size() && weight.name.ends_with(bias))
    return "model." + weight.name;
  return "model." + weight.name + ".weight";
}

std::vector<const WeightTensor*> match_weights(const WeightSource& source,
                                               const ModelProgram& program,
                                               std::span<const WeightShard> shards) {
  FF_CHECK(shards.empty() || shards.size() == program.weights.size(), E::kInternal, shards.size(),
           " shards for ", program.weights.size(), " weights");
  std::vector<const WeightTensor*> matched;
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < program.weights.size(); ++i) {
    // An fp8 weight's scales are computed when it is quantised, not read.
    if (program.weights[i].scales_of >= 0) {
      matched.push_back(nullptr);
      continue;
    }
    // A rank's weight is part of the checkpoint's whole tensor.
    ProgramWeight w = program.weights[i];
    if (!shards.empty() && shards[i].axis >= 0) {
      w.shape[std::min<std::size_t>(shards[i].axis, w.shape.size() - 1)] = shards[i].whole;
    }
    const std::string name = hf_weight_name(w);
    const WeightTensor* t = source.find(name);
    matched.push_back(t);
    if (t == nullptr) {
      const std::string stored = source.stored_name(name);
      problems.push_back("no tensor " + printable(stored, 200) +
                         (stored == name ? "" : " (" + name + ")") +
                         "; the model program needs it as " + shape_text(w.shape));
      continue;
    }
    const std::string where = printable(t->file, 200) + ": tensor " + t->describe();
    if (t->shape != w.shape) {
      problems.push_back(where + " is " + shape_text(t->shape) + "; the model program expects " +
                         shape_text(w.shape));
    }
    if (!t->unreadable.empty()) problems.push_back(where + ": " + t->unreadable);
  }
  if (problems.empty()) return matched;
  std::string text;
  for (std::size_t i = 0; i < problems.size() && i < kMaxListed; ++i) {
    text += "\n  " + problems[i];
  }
  if (problems.size() > kMaxListed) {
    text += "\n  ... and " + std::to_string(problems.size() - kMaxListed) + " more";
  }
  FF_THROW(E::kInvalidArgument, "checkpoint ", printable(source.path(), 200), " (", source.format(),
           ") cannot give the model's weights, ", problems.size(),
           problems.size() == 1 ? " problem:" : " problems:", text);
}

std::vector<KvCacheScales> checkpoint_kv_cache_scales(const WeightSource& source,
                                                      const CheckpointConfig& config,
                                                      int num_layers) {
  std::vector<KvCacheScales> scales;
  if (!config.fp8 || !config.fp8->kv_cache_scales) return scales;
  const auto read = [&](int layer, const char* which) {
    const std::string name =
        "model.layers." + std::to_string(layer) + ".self_attn." + which + "_scale";
    const WeightTensor* t = source.find(name);
    FF_CHECK(t != nullptr, E::kInvalidArgument, "checkpoint ", printable(source.path(), 200),
             ": no tensor ", name, ", though ", config.fp8->origin, " states a kv_cache_scheme");
    const std::string where = printable(t->file, 200) + ": tensor " + t->describe();
    FF_CHECK(t->rows() * t->row_elements() == 1 && t->unreadable.empty(), E::kInvalidArgument,
             where, ": a KV cache scale is one F32, BF16 or F16 value; it is ", t->type, " of ",
             shape_text(t->shape));
    float value = 0;
    std::byte bytes[sizeof(float)];
    source.read_rows(*t, 0, 1, DType::kF32, bytes);
    std::memcpy(&value, bytes, sizeof value);
    FF_CHECK(std::isfinite(value) && value > 0, E::kInvalidArgument, where, ": holds ", value,
             "; a KV cache scale is finite and positive");
    return value;
  };
  for (int layer = 0; layer < num_layers; ++layer) {
    scales.push_back({read(layer, "k"), read(layer, "v")});
  }
  return scales;
}

}  // namespace freezeframe
