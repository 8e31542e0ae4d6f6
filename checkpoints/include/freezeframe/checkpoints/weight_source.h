#pragma once
// WeightSource: a checkpoint's tensors under the Hugging Face names the model program uses
// ("model.layers.3.self_attn.q_proj.weight"), each read converted to the model's dtype into a
// caller's buffer, a range of rows at a time, so an upload can stream a tensor through a
// bounded buffer. Two sources: safetensors (one file or shards with their index) and GGUF,
// whose llama.cpp names are mapped to Hugging Face's and whose rotary q/k rows are put back in
// Hugging Face's order (Note [GGUF rotary rows]).
// (The engine checks a source against its model program before anything is read:
// freezeframe/engine/model/checkpoint_weights.h.)

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/base/dtype.h"
#include "freezeframe/checkpoints/checkpoint_config.h"

namespace freezeframe {

/// One tensor of a checkpoint, as the model program names and shapes it.
struct WeightTensor {
  std::string name;                 ///< Hugging Face's: "model.layers.0.self_attn.q_proj.weight"
  std::string stored_name;          ///< as in the file: the same, or GGUF's "blk.0.attn_q.weight"
  std::string file;                 ///< the file holding it
  std::string type;                 ///< as stored: "BF16", "F16", "F32", "Q8_0", "Q4_K", "I8", ...
  std::vector<std::int64_t> shape;  ///< Hugging Face's, outermost first: [out, in]
  /// Empty when read_rows converts its type; else why not ("Q4_K is not read; ...").
  std::string unreadable;
  /// An fp8 weight's scale tensor ("...down_proj.weight_scale"), which read_rows applies;
  /// empty for any other.
  std::string scale;

  /// Rows read_rows counts in: shape[0] (a vector's rows are its elements).
  [[nodiscard]] std::int64_t rows() const;
  /// Elements per row: the product of the dimensions after the first (1 for a vector).
  [[nodiscard]] std::int64_t row_elements() const;
  /// "blk.0.attn_q.weight (model.layers.0.self_attn.q_proj.weight)", or the name alone.
  [[nodiscard]] std::string describe() const;
};

class WeightSource {
 public:
  /// The weights of the checkpoint `config` was read from: the GGUF file itself, or the
  /// safetensors beside a Hugging Face config.json (model.safetensors or the shards its
  /// index names). Throws kNotFound when they cannot be opened and kInvalidArgument naming the
  /// file for a file that is truncated or inconsistent (the readers check every offset).
  [[nodiscard]] static std::unique_ptr<WeightSource> open(const CheckpointConfig& config);

  virtual ~WeightSource() = default;

  /// The checkpoint as named (a folder, a .safetensors or index file, a .gguf file).
  [[nodiscard]] virtual const std::string& path() const = 0;
  /// "safetensors" or "GGUF".
  [[nodiscard]] virtual std::string_view format() const = 0;
  /// Every tensor it holds under a Hugging Face name (GGUF tensors of no such name, such as
  /// rope_freqs.weight, are left out).
  [[nodiscard]] virtual std::span<const WeightTensor> tensors() const = 0;
  /// The name `name` would have in the file ("blk.0.ffn_up.weight" for GGUF), for messages
  /// about a tensor it lacks.
  [[nodiscard]] virtual std::string stored_name(std::string_view name) const = 0;

  /// Rows [first, first + count) of `tensor` (one of tensors()), converted to `dtype` (bf16,
  /// f16 or f32; rounded to nearest even; an fp8 weight dequantised with its scale first),
  /// row-major into `out`, which holds exactly count ·
  /// row_elements() elements of `dtype`. Throws kInvalidArgument for rows outside the tensor or
  /// a buffer of another size, kUnsupported for an unreadable tensor.
  virtual void read_rows(const WeightTensor& tensor, std::int64_t first, std::int64_t count,
                         DType dtype, std::span<std::byte> out) const = 0;

  [[nodiscard]] const WeightTensor* find(std::string_view name) const;
};

/// Note [GGUF rotary rows]: llama.cpp's converter stores a Llama q or k projection with the
/// rows of each head interleaved for its rotary layout: per head, the rows are reshaped
/// (2, head_size / 2) and transposed, so Hugging Face's row j of a head (pairs (j, j + d/2)
/// rotate together there) is row 2·(j mod d/2) + j div (d/2) of the head in the file. This is
/// that row, for row `row` of a tensor of heads of `head_size` rows; Qwen2 files are stored
/// unpermuted.
[[nodiscard]] std::int64_t gguf_rotary_row(std::int64_t row, std::int64_t head_size);

}  // namespace freezeframe
