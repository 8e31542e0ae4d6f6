#pragma once
// The host's per-row fp8 quantisation: how a weight is quantised at load for W8A8 projections
// (model.quantization fp8), the same arithmetic as the GPU's quantize_rows_fp8 of their inputs.
// Private to runtime/.

#include <cstddef>
#include <cstdint>

namespace freezeframe {

/// Rounds each of `rows` rows of `cols` f32 values at `values` to fp8 e4m3 at `out` (rows of
/// `cols` bytes; `out` may be `values` itself: each byte is written after its value is read),
/// scaled by 448 / max|row|, and writes each row's scale (max|row| / 448, 1 for zeros).
void quantize_rows_to_fp8(const float* values, std::int64_t rows, std::int64_t cols, std::byte* out,
                          float* scales);

}  // namespace freezeframe
