#include "freezeframe/checkpoints/weight_source.h"

#include <algorithm>
#include <filesystem>

#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "weight_sources.h"

namespace freezeframe {

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
  return open_safetensors_weights(folder.string(), config.fp8 ? &*config.fp8 : nullptr);
}

std::int64_t gguf_rotary_row(std::int64_t row, std::int64_t head_size) {
  const std::int64_t half = head_size / 2;
  const std::int64_t head = row / head_size, j = row % head_size;
  return head * head_size + 2 * (j % half) + j / half;
}

}  // namespace freezeframe
