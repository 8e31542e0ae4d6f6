#pragma once
// MappedWeights: what the safetensors and GGUF weight sources share once they have named and
// shaped their tensors: each tensor's bytes in a mapped file and how to decode them, and
// read_rows over them (row runs decoded to f32 in bounded pieces, then rounded to the model's
// dtype; a straight copy when the stored type is the model's). Private to model/.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/checkpoints/weight_source.h"

namespace freezeframe {

class MappedWeights : public WeightSource {
 public:
  /// How a tensor's bytes decode.
  enum class Codec {
    kSafetensors,  ///< safetensors_to_f32 with the tensor's dtype
    kGgml,         ///< dequantize_to_f32 with the GGML type
  };
  struct Stored {
    std::span<const std::byte> bytes;  ///< the whole tensor in the mapped file
    Codec codec = Codec::kSafetensors;
    std::uint32_t ggml_type = 0;
    /// > 0: the rows are stored in llama.cpp's rotary order for heads of this many rows
    /// (Note [GGUF rotary rows]).
    std::int64_t rotary_head_size = 0;
    /// An fp8 weight's scales, row-major over blocks of scale_rows × scale_cols values (one
    /// block: a scale per tensor; rows of one: per channel); empty: the values are unscaled.
    std::vector<float> scales;
    std::int64_t scale_rows = 0;
    std::int64_t scale_cols = 0;
  };

  [[nodiscard]] const std::string& path() const override { return path_; }
  [[nodiscard]] std::span<const WeightTensor> tensors() const override { return tensors_; }
  void read_rows(const WeightTensor& tensor, std::int64_t first, std::int64_t count, DType dtype,
                 std::span<std::byte> out) const override;

 protected:
  explicit MappedWeights(std::string path) : path_(std::move(path)) {}
  void add(WeightTensor tensor, Stored stored);

 private:
  /// Decodes `rows` stored rows from `src_row` into `out` (rows · row_elements of `dtype`),
  /// through `scratch` (kept between the runs of one read).
  void read_run(std::size_t index, std::int64_t src_row, std::int64_t rows, DType dtype,
                std::byte* out, std::vector<float>& scratch) const;

  std::string path_;
  std::vector<WeightTensor> tensors_;
  std::vector<Stored> stored_;  // one per tensor
};

}  // namespace freezeframe
