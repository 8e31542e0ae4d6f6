#include "freezeframe/engine/model/weight_source.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "freezeframe/core/error.h"
#include "freezeframe/core/printable.h"
#include "model/weight_sources.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

// Problems listed in one refusal; the rest are counted.
constexpr std::size_t kMaxListed = 16;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

}  // namespace

std::int64_t WeightTensor::rows() const { return shape.empty() ? 1 : shape[0]; }

std::int64_t WeightTensor::row_elements() const {
  std::int64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::string WeightTensor::describe() const {
  if (stored_name == name) return printable(name, 200);
  return printable(stored_name, 200) + " (" + printable(name, 200) + ")";
}

const WeightTensor* WeightSource::find(std::string_view name) const {
  for (const WeightTensor& t : tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::unique_ptr<WeightSource> WeightSource::open(const CheckpointConfig& config) {
  if (config.format == CheckpointFormat::kGguf) return open_gguf_weights(config);
  // The safetensors lie beside config.json (model.safetensors, or shards and their index).
  std::filesystem::path folder = std::filesystem::path(config.config_file).parent_path();
  if (folder.empty()) folder = ".";
  return open_safetensors_weights(folder.string());
}

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

std::int64_t gguf_rotary_row(std::int64_t row, std::int64_t head_size) {
  const std::int64_t half = head_size / 2;
  const std::int64_t head = row / head_size, j = row % head_size;
  return head * head_size + 2 * (j % half) + j / half;
}

}  // namespace freezeframe
