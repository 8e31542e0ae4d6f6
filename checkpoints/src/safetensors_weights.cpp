// The safetensors weight source: a checkpoint's tensors as they are, their names already the
// Hugging Face names the model program uses.

#include <utility>

#include "freezeframe/checkpoints/safetensors_file.h"
#include "mapped_weights.h"
#include "weight_sources.h"

namespace freezeframe {
namespace {

class SafetensorsWeights final : public MappedWeights {
 public:
  explicit SafetensorsWeights(const std::string& path)
      : MappedWeights(path), checkpoint_(SafetensorsCheckpoint::open(path)) {
    for (const SafetensorsFile& file : checkpoint_.files()) {
      for (const SafetensorsTensor& t : file.tensors()) {
        WeightTensor w;
        w.name = t.name;
        w.stored_name = t.name;
        w.file = file.path();
        w.type = t.dtype;
        w.shape = t.shape;
        if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
          w.unreadable = t.dtype + " is not read as weights; F32, F16 and BF16 are";
        }
        add(std::move(w), {file.bytes(t), Codec::kSafetensors, 0, 0});
      }
    }
  }

  [[nodiscard]] std::string_view format() const override { return "safetensors"; }
  [[nodiscard]] std::string stored_name(std::string_view name) const override {
    return std::string(name);
  }

 private:
  SafetensorsCheckpoint checkpoint_;  // the mapped files the tensors' bytes lie in
};

}  // namespace

std::unique_ptr<WeightSource> open_safetensors_weights(const std::string& path) {
  return std::make_unique<SafetensorsWeights>(path);
}

}  // namespace freezeframe
