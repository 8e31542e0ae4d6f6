#pragma once
// The built-in model's element-wise kernels (everything of a Llama-style layer that is not a
// GEMM or attention). Every launch's grid follows `rows` (the step's padded row count) and
// the tensor widths, never the step's data, so the same launch is right at capture and replay.
// Activations and weights are bf16 or f16 (the model dtype); arithmetic is f32.
// Every function checks its arguments and throws kInvalidArgument before enqueuing anything.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "freezeframe/core/tensor.h"

namespace freezeframe::model_kernels {

/// out[r, :] = table[token_ids[r] − first_id, :] for r < rows. table [n, width] holds the rows
/// of ids [first_id, first_id + n) (a tensor-parallel rank's vocabulary shard); out [≥ rows,
/// width] (row stride may exceed width), of the table's dtype or f32 (a residual stream kept in
/// f32). Ids outside them give a zero row.
void embedding(const TensorView& table, const std::int32_t* token_ids, int rows,
               const TensorView& out, cudaStream_t stream, std::int64_t first_id = 0);

/// out[r, :] = in[r, :] / sqrt(mean(in[r, :]²) + eps) · weight for r < rows. in, out
/// [≥ rows, width] (each may have a row stride larger than width, e.g. a slice of a wider
/// tensor); weight [width] of out's dtype; in of out's dtype or f32 (a residual stream).
void rms_norm(const TensorView& in, const TensorView& weight, float eps, const TensorView& out,
              int rows, cudaStream_t stream);

/// A W8A8 projection's input as an op writes it when the quantisation is fused into the op:
/// rows [≥ rows, width] fp8_e4m3 with unit column stride, and a device f32 scale per row, as
/// quantize_rows_fp8 writes them.
struct Fp8RowsOut {
  TensorView rows;
  float* scale = nullptr;
};

/// rms_norm with its result quantised per row into `fp8` (the bytes and scales of rms_norm then
/// quantize_rows_fp8, one kernel instead of two), and written to `out` as well when `out` is
/// defined (another op reads it); weight of the model's dtype.
void rms_norm_fp8(const TensorView& in, const TensorView& weight, float eps, const TensorView& out,
                  const Fp8RowsOut& fp8, int rows, cudaStream_t stream);

/// out[r, :] = rms_norm(in[row_index[r], :]) for r < rows (the last new token of each
/// request, which the LM head reads); a row index of −1 (a padded request) or outside `in`
/// gives a zero row. row_index is device memory [rows].
void rms_norm_rows(const TensorView& in, const std::int32_t* row_index, int rows,
                   const TensorView& weight, float eps, const TensorView& out, cudaStream_t stream);

/// Rotary embedding, Neox style (rotate_half: pairs (i, i + rotary_dim / 2)), in place on the
/// first num_heads + num_kv_heads heads of each row of qkv [≥ rows, (num_heads + 2·num_kv_heads)
/// · head_size] (q heads, then k heads; the v heads are left alone). Position p rotates pair i
/// by the f32 angle p · inv_freq[i]. positions: device [rows]; inv_freq: host, rotary_dim / 2
/// finite values > 0 (rope_inv_frequencies: theta^(−2i / rotary_dim), scaled as the model
/// says), copied into the launch's parameters.
void rope_neox(const TensorView& qkv, const std::int64_t* positions, int rows, int num_heads,
               int num_kv_heads, int head_size, int rotary_dim, std::span<const float> inv_freq,
               cudaStream_t stream);

/// out[r, i] = silu(gate_up[r, i]) · gate_up[r, I + i] for r < rows, i < I; gate_up [≥ rows,
/// 2·I], out [≥ rows, I]; silu(x) = x / (1 + e^−x).
void silu_and_mul(const TensorView& gate_up, const TensorView& out, int rows, cudaStream_t stream);

/// silu_and_mul with its result quantised per row into `fp8` (the bytes and scales of
/// silu_and_mul then quantize_rows_fp8), and written to `out` as well when it is defined.
void silu_and_mul_fp8(const TensorView& gate_up, const TensorView& out, const Fp8RowsOut& fp8,
                      int rows, cudaStream_t stream);

/// The per-token fp8 quantisation of a W8A8 projection's input, for r < rows: scale[r] =
/// max|in[r, :]| / 448 (1 for a row of zeros) and out[r, :] = in[r, :] · 448 / max|in[r, :]|
/// rounded to e4m3 (nearest even, saturating). in [≥ rows, width] of the model dtype or f32
/// (its row stride may exceed width); out [≥ rows, width] fp8_e4m3 with unit column stride;
/// scale: device f32 [≥ rows].
void quantize_rows_fp8(const TensorView& in, const TensorView& out, float* scale, int rows,
                       cudaStream_t stream);

/// y[r, :] += bias for r < rows, rounded once per element. y [≥ rows, width] (its row stride
/// may exceed width: a column slice of a wider tensor); bias [width], contiguous, of y's dtype.
void add_bias(const TensorView& y, const TensorView& bias, int rows, cudaStream_t stream);

/// Deterministic pseudo-random fill of a contiguous tensor (bf16, f16, f32 or fp8_e4m3): element i
/// gets lo + (hi − lo)·u(seed, i), u a counter-based hash in [0, 1). The same (seed, i) gives the
/// same value on every run and device.
void fill_uniform(const TensorView& t, std::uint64_t seed, float lo, float hi, cudaStream_t stream);

/// The same fill of a part of a larger tensor: t [rows, cols] is the block of a row-major
/// [·, whole_cols] tensor starting at (first_row, first_col), and each element gets the value
/// it has in that tensor's fill_uniform (a tensor-parallel rank's shard of the whole weight).
void fill_uniform_block(const TensorView& t, std::uint64_t seed, float lo, float hi,
                        std::int64_t whole_cols, std::int64_t first_row, std::int64_t first_col,
                        cudaStream_t stream);

}  // namespace freezeframe::model_kernels
