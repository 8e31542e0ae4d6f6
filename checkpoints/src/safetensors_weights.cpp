// The safetensors weight source: a checkpoint's tensors as they are, their names already the
// Hugging Face names the model program uses. An fp8 checkpoint's F8_E4M3 weights are paired
// with the scale tensors beside them, each checked against the config's scheme.

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/fp8_scheme.h"
#include "freezeframe/checkpoints/safetensors_file.h"
#include "mapped_weights.h"
#include "weight_sources.h"

namespace freezeframe {
namespace {

/// The scale tensor's shape the scheme asks of a weight of `rows` × `cols`, as a list of
/// acceptable shapes (a per-tensor scale is written [] or [1], per channel [rows] or
/// [rows, 1]).
std::vector<std::vector<std::int64_t>> scale_shapes(const Fp8Scheme& scheme, std::int64_t rows,
                                                    std::int64_t cols) {
  switch (scheme.weight_scales) {
    case Fp8Scheme::WeightScales::kTensor: return {{}, {1}};
    case Fp8Scheme::WeightScales::kChannel: return {{rows}, {rows, 1}};
    case Fp8Scheme::WeightScales::kBlock:
      return {{(rows + scheme.block_rows - 1) / scheme.block_rows,
               (cols + scheme.block_cols - 1) / scheme.block_cols}};
  }
  return {};
}

class SafetensorsWeights final : public MappedWeights {
 public:
  SafetensorsWeights(const std::string& path, const Fp8Scheme* fp8)
      : MappedWeights(path), checkpoint_(SafetensorsCheckpoint::open(path)) {
    for (const SafetensorsFile& file : checkpoint_.files()) {
      for (const SafetensorsTensor& t : file.tensors()) {
        WeightTensor w;
        w.name = t.name;
        w.stored_name = t.name;
        w.file = file.path();
        w.type = t.dtype;
        w.shape = t.shape;
        Stored stored;
        stored.bytes = file.bytes(t);
        if (t.dtype == "F8_E4M3") {
          w.unreadable = pair_with_scale(w, fp8, stored);
        } else if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
          w.unreadable = t.dtype + " is not read as weights; F32, F16, BF16 and F8_E4M3 are";
        }
        add(std::move(w), std::move(stored));
      }
    }
  }

  [[nodiscard]] std::string_view format() const override { return "safetensors"; }
  [[nodiscard]] std::string stored_name(std::string_view name) const override {
    return std::string(name);
  }

 private:
  /// Finds, checks and reads the scale of the fp8 weight `w` into `stored`; why it cannot be
  /// read when it cannot.
  std::string pair_with_scale(WeightTensor& w, const Fp8Scheme* fp8, Stored& stored) const {
    if (fp8 == nullptr) {
      return "is F8_E4M3, and config.json has no quantization_config to say how it is scaled";
    }
    const std::string suffix = ".weight";
    if (w.name.size() <= suffix.size() ||
        w.name.compare(w.name.size() - suffix.size(), suffix.size(), suffix) != 0 ||
        w.shape.size() != 2) {
      return "is F8_E4M3 but not the weight matrix of a linear layer, the only fp8 tensors read";
    }
    const std::string name =
        w.name.substr(0, w.name.size() - suffix.size() + 1) + fp8->scale_suffix;
    const SafetensorsCheckpoint::Found found = checkpoint_.find(name);
    if (found.tensor == nullptr) {
      return "is F8_E4M3 and its scale " + quote(name) + " is not in the checkpoint (" +
             fp8->origin + " says " + std::string(to_string(fp8->weight_scales)) + ")";
    }
    const SafetensorsTensor& scale = *found.tensor;
    const std::string what =
        "its scale " + quote(name) + " (" + printable(found.file->path(), 200) + ")";
    if (scale.dtype != "F32" && scale.dtype != "BF16" && scale.dtype != "F16") {
      return what + " is " + scale.dtype + "; scales are F32, BF16 or F16";
    }
    const std::int64_t rows = w.shape[0], cols = w.shape[1];
    const auto shapes = scale_shapes(*fp8, rows, cols);
    bool shape_ok = false;
    for (const auto& s : shapes) shape_ok = shape_ok || s == scale.shape;
    if (!shape_ok) {
      return what + " has shape " + shape_text(scale.shape) + "; " +
             std::string(to_string(fp8->weight_scales)) + " of a " + shape_text(w.shape) +
             " weight is " + shape_text(shapes.back());
    }
    stored.scales.resize(static_cast<std::size_t>(scale.elements()));
    found.file->read_f32(scale, stored.scales);
    for (const float v : stored.scales) {
      if (!std::isfinite(v) || v < 0) {
        return what + " holds " + std::to_string(v) + "; a scale is finite and not negative";
      }
    }
    switch (fp8->weight_scales) {
      case Fp8Scheme::WeightScales::kTensor:
        stored.scale_rows = rows;
        stored.scale_cols = cols;
        break;
      case Fp8Scheme::WeightScales::kChannel:
        stored.scale_rows = 1;
        stored.scale_cols = cols;
        break;
      case Fp8Scheme::WeightScales::kBlock:
        stored.scale_rows = fp8->block_rows;
        stored.scale_cols = fp8->block_cols;
        break;
    }
    // A weight of no rows or columns has nothing to scale (and blocks of 0 would divide by 0).
    stored.scale_rows = std::max<std::int64_t>(stored.scale_rows, 1);
    stored.scale_cols = std::max<std::int64_t>(stored.scale_cols, 1);
    w.scale = name;
    return "";
  }

  SafetensorsCheckpoint checkpoint_;  // the mapped files the tensors' bytes lie in
};

}  // namespace

std::unique_ptr<WeightSource> open_safetensors_weights(const std::string& path,
                                                       const Fp8Scheme* fp8) {
  return std::make_unique<SafetensorsWeights>(path, fp8);
}

}  // namespace freezeframe
