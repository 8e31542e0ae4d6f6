#include "mapped_weights.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/base/host_half.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "freezeframe/checkpoints/safetensors_file.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

// f32 values decoded at a time: bounds the scratch a read takes whatever the chunk.
constexpr std::int64_t kScratchValues = std::int64_t(1) << 20;

/// The stored type when it is `dtype` itself, so its bytes are the answer.
bool stored_as(const WeightTensor& t, DType dtype) {
  switch (dtype) {
    case DType::kF32: return t.type == "F32";
    case DType::kF16: return t.type == "F16";
    case DType::kBF16: return t.type == "BF16";
    default: return false;
  }
}

void encode(std::span<const float> values, DType dtype, std::byte* out) {
  switch (dtype) {
    case DType::kF32: std::memcpy(out, values.data(), values.size_bytes()); return;
    case DType::kBF16:
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t v = host_half::f32_to_bf16(values[i]);
        std::memcpy(out + 2 * i, &v, 2);
      }
      return;
    case DType::kF16:
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t v = host_half::f32_to_f16(values[i]);
        std::memcpy(out + 2 * i, &v, 2);
      }
      return;
    default: break;
  }
  FF_THROW(E::kInternal, "weights encoded as ", name_of(dtype));
}

/// Multiplies `values` (whole rows of `row_elements`, the first being row `first_row`) by
/// their scales.
void apply_scales(const MappedWeights::Stored& s, std::int64_t row_elements, std::int64_t first_row,
                  std::span<float> values) {
  const std::int64_t blocks_per_row = (row_elements + s.scale_cols - 1) / s.scale_cols;
  const auto rows = static_cast<std::int64_t>(values.size()) / row_elements;
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* scale = s.scales.data() + ((first_row + i) / s.scale_rows) * blocks_per_row;
    float* row = values.data() + i * row_elements;
    for (std::int64_t c = 0; c < row_elements; ++c) row[c] *= scale[c / s.scale_cols];
  }
}

}  // namespace

void MappedWeights::add(WeightTensor tensor, Stored stored) {
  // Rows are read one by one, so each must be whole bytes (a quantised vector is not).
  const std::int64_t rows = tensor.rows();
  if (tensor.unreadable.empty() && rows > 0 &&
      stored.bytes.size() % static_cast<std::uint64_t>(rows) != 0) {
    tensor.unreadable = "its " + std::to_string(stored.bytes.size()) + " bytes are not " +
                        std::to_string(rows) + " rows of whole blocks";
  }
  tensors_.push_back(std::move(tensor));
  stored_.push_back(std::move(stored));
}

void MappedWeights::read_rows(const WeightTensor& tensor, std::int64_t first, std::int64_t count,
                              DType dtype, std::span<std::byte> out) const {
  FF_CHECK(!tensors_.empty() && &tensor >= tensors_.data() &&
               &tensor < tensors_.data() + tensors_.size(),
           E::kInvalidArgument, "read_rows: tensor '", printable(tensor.name, 200),
           "' is not one of this source's");
  const auto index = static_cast<std::size_t>(&tensor - tensors_.data());
  const std::string where = printable(tensor.file, 200) + ": tensor '" + tensor.describe() + "'";
  FF_CHECK(tensor.unreadable.empty(), E::kUnsupported, where, ": ", tensor.unreadable);
  FF_CHECK(dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32,
           E::kInvalidArgument, where, ": weights are read as bf16, f16 or f32, not ",
           name_of(dtype));
  const std::int64_t rows = tensor.rows();
  FF_CHECK(first >= 0 && count >= 0 && first <= rows && count <= rows - first, E::kInvalidArgument,
           where, ": rows [", first, ", ", first + count, ") are outside its ", rows);
  const std::int64_t row_bytes = tensor.row_elements() * std::int64_t(size_of(dtype));
  FF_CHECK(static_cast<std::int64_t>(out.size()) == count * row_bytes, E::kInvalidArgument, where,
           ": ", count, " rows of ", name_of(dtype), " take ", count * row_bytes,
           " bytes; the buffer holds ", out.size());
  const std::int64_t head = stored_[index].rotary_head_size;
  std::vector<float> scratch;
  std::int64_t done = 0;
  while (done < count) {
    // A run of rows that lie back to back in the file: all of them unless the rows are stored
    // in rotary order, where each row comes from elsewhere in its head.
    const std::int64_t src = head > 0 ? gguf_rotary_row(first + done, head) : first + done;
    const std::int64_t run = head > 0 ? 1 : count - done;
    read_run(index, src, run, dtype, out.data() + done * row_bytes, scratch);
    done += run;
  }
}

void MappedWeights::read_run(std::size_t index, std::int64_t src_row, std::int64_t rows,
                             DType dtype, std::byte* out, std::vector<float>& scratch) const {
  const WeightTensor& t = tensors_[index];
  const Stored& s = stored_[index];
  const std::int64_t row_elements = t.row_elements();
  const auto stored_row_bytes = static_cast<std::int64_t>(s.bytes.size()) / t.rows();
  const std::byte* src = s.bytes.data() + src_row * stored_row_bytes;
  if (stored_as(t, dtype)) {
    std::memcpy(out, src, static_cast<std::size_t>(rows * stored_row_bytes));
    return;
  }
  // Whole rows per piece (a block-quantised row decodes only whole), at least one.
  const std::int64_t piece_rows = std::max<std::int64_t>(1, kScratchValues / row_elements);
  scratch.resize(static_cast<std::size_t>(std::min(rows, piece_rows) * row_elements));
  const auto out_row_bytes = row_elements * static_cast<std::int64_t>(size_of(dtype));
  for (std::int64_t r = 0; r < rows; r += piece_rows) {
    const std::int64_t n = std::min(piece_rows, rows - r);
    const std::span<float> values(scratch.data(), static_cast<std::size_t>(n * row_elements));
    const std::span<const std::byte> bytes(src + r * stored_row_bytes,
                                           static_cast<std::size_t>(n * stored_row_bytes));
    try {
      if (s.codec == Codec::kGgml) {
        dequantize_to_f32(s.ggml_type, bytes, values);
      } else {
        safetensors_to_f32(t.type, bytes, values);
      }
    } catch (const Error& e) {
      FF_THROW(e.code(), printable(t.file, 200), ": tensor '", t.describe(), "': ", e.message());
    }
    if (!s.scales.empty()) apply_scales(s, row_elements, src_row + r, values);
    encode(values, dtype, out + r * out_row_bytes);
  }
}

}  // namespace freezeframe
