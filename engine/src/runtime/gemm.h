#pragma once
// The built-in model's GEMMs through cuBLAS (cuBLASLt for fp8), on a workspace the memory plan
// owns, so nothing allocates while a graph is captured (cuBLAS would otherwise take its workspace
// from its default pool, which allocates inside a capture: allocation nodes in every graph).

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>

#include "freezeframe/core/tensor.h"

namespace freezeframe {

class Gemm {
 public:
  /// `workspace`: device bytes for cuBLAS (kCublasWorkspaceBytes from the plan).
  explicit Gemm(const TensorView& workspace);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// y[:rows] = x[:rows] · weightᵀ + beta · y[:rows]   (a Linear layer; beta 1 adds a residual)
  /// x [≥ rows, K] and y [≥ rows, N] row-major with unit column stride (row strides may be
  /// larger: column slices); weight [N, K] contiguous, the model dtype like x; y in the model
  /// dtype or f32. f32 accumulation. rows == 0 enqueues nothing.
  void linear(const TensorView& x, const TensorView& weight, const TensorView& y, int rows,
              float beta, cudaStream_t stream);

  /// The W8A8 form: y[r, j] = x_scale[r] · weight_scale[j] · Σ_k x[r, k] · weight[j, k]
  /// + beta · y[r, j] for r < rows, on cuBLASLt with outer-vector scales (f32 accumulation).
  /// x [≥ rows, K] and weight [N, K] fp8_e4m3 (weight contiguous; K and x's row stride
  /// multiples of 16); x_scale: device f32 [≥ rows]; weight_scale: device f32 [N]; y bf16,
  /// f16 or f32 [≥ rows, N] with unit column stride. rows == 0 enqueues nothing.
  void linear_fp8(const TensorView& x, const float* x_scale, const TensorView& weight,
                  const float* weight_scale, const TensorView& y, int rows, float beta,
                  cudaStream_t stream);

 private:
  /// Makes `stream` the handle's stream. cublasSetStream puts the handle back on cuBLAS's
  /// default workspace pool, so the planned workspace is set again after it.
  void use_stream(cudaStream_t stream);

  cublasHandle_t handle_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;  // the fp8 GEMMs (cublasGemmEx has no per-row scales)
  /// What picks an fp8 GEMM's algorithm: its shape, strides, output and alignments.
  struct Fp8Key {
    std::int64_t n, k, rows, x_stride, y_stride;
    DType y_dtype;
    bool accumulate;
    std::uint32_t weight_alignment, x_alignment, y_alignment;
    auto operator<=>(const Fp8Key&) const = default;
  };
  /// An fp8 GEMM's descriptors and algorithm (gemm.cpp).
  struct Fp8Plan;
  [[nodiscard]] std::unique_ptr<Fp8Plan> plan_fp8(const Fp8Key& key, std::size_t workspace_bytes,
                                                  const float* weight_scale, const float* x_scale);
  std::map<Fp8Key, std::unique_ptr<Fp8Plan>> fp8_plans_;
  TensorView workspace_;
  cudaStream_t stream_ = nullptr;
  bool stream_set_ = false;
};

}  // namespace freezeframe
