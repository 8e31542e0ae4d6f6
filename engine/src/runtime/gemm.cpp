#include "runtime/gemm.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "freezeframe/base/error.h"

namespace freezeframe {
namespace {

#define FF_CUBLAS_CHECK(statement)                                                          \
  do {                                                                                      \
    const cublasStatus_t ff_cublas_status_ = (statement);                                   \
    FF_CHECK(ff_cublas_status_ == CUBLAS_STATUS_SUCCESS, ErrorCode::kCudaError, #statement, \
             " failed: ", cublasGetStatusName(ff_cublas_status_), " (",                     \
             cublasGetStatusString(ff_cublas_status_), ")");                                \
  } while (0)

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF32: return CUDA_R_32F;
    default:
      FF_THROW(ErrorCode::kUnsupported, "GEMMs run in bf16, f16 or f32, not ", name_of(dtype));
  }
}

void check_matrix(const TensorView& t, const char* what) {
  FF_CHECK(
      t.defined() && t.is_cuda() && t.dim() == 2 && t.stride(1) == 1 && t.stride(0) >= t.size(1),
      ErrorCode::kInvalidArgument, "linear: ", what,
      " must be a 2-d device matrix with unit column stride, got ",
      t.defined() ? t.describe() : std::string("nothing"));
}

/// The largest power of two, up to 256, that `p` is a multiple of (cuBLASLt's alignment
/// preferences: an algorithm picked for better-aligned pointers may not run on these).
std::uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
  FF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

}  // namespace

/// cuBLASLt's descriptors and algorithm of one fp8 GEMM shape, destroyed with it.
struct Gemm::Fp8Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Fp8Plan() = default;
  Fp8Plan(const Fp8Plan&) = delete;
  Fp8Plan& operator=(const Fp8Plan&) = delete;
  ~Fp8Plan() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    for (cublasLtMatrixLayout_t l : {a, b, d}) {
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
    }
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm(const TensorView& workspace) : workspace_(workspace) {
  FF_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    // Deterministic results: the same step gives the same bits in a graph and eagerly.
    FF_CUBLAS_CHECK(cublasSetAtomicsMode(handle_, CUBLAS_ATOMICS_NOT_ALLOWED));
    FF_CUBLAS_CHECK(cublasLtCreate(&lt_));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

Gemm::~Gemm() {
  fp8_plans_.clear();  // their descriptors before the handle
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void Gemm::use_stream(cudaStream_t stream) {
  if (stream_set_ && stream == stream_) return;
  FF_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  if (workspace_.defined()) {
    FF_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(),
                                       static_cast<std::size_t>(workspace_.span_bytes())));
  }
  stream_ = stream;
  stream_set_ = true;
}

void Gemm::linear(const TensorView& x, const TensorView& weight, const TensorView& y, int rows,
                  float beta, cudaStream_t stream) {
  check_matrix(x, "x");
  check_matrix(weight, "weight");
  check_matrix(y, "y");
  const std::int64_t n = weight.size(0), k = weight.size(1);
  FF_CHECK(weight.is_contiguous() && x.size(1) == k && y.size(1) == n && rows >= 0 &&
               rows <= x.size(0) && rows <= y.size(0) && x.dtype() == weight.dtype(),
           ErrorCode::kInvalidArgument, "linear: x ", x.describe(), " · weightᵀ ",
           weight.describe(), " → y ", y.describe(), " over ", rows, " rows does not fit");
  if (rows == 0) return;
  const float alpha = 1.0f;
  use_stream(stream);
  // Row-major y [rows, n] is column-major yᵀ [n, rows] = weight (col-major [k, n], transposed)
  // times xᵀ (col-major [k, rows]).
  FF_CUBLAS_CHECK(cublasGemmEx(
      handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), rows, static_cast<int>(k), &alpha,
      weight.data(), cuda_type(weight.dtype()), static_cast<int>(k), x.data(), cuda_type(x.dtype()),
      static_cast<int>(x.stride(0)), &beta, y.data(), cuda_type(y.dtype()),
      static_cast<int>(y.stride(0)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void Gemm::linear_fp8(const TensorView& x, const float* x_scale, const TensorView& weight,
                      const float* weight_scale, const TensorView& y, int rows, float beta,
                      cudaStream_t stream) {
  check_matrix(x, "x");
  check_matrix(weight, "weight");
  check_matrix(y, "y");
  const std::int64_t n = weight.size(0), k = weight.size(1);
  FF_CHECK(weight.is_contiguous() && x.size(1) == k && y.size(1) == n && rows >= 0 &&
               rows <= x.size(0) && rows <= y.size(0) && x.dtype() == DType::kFp8E4M3 &&
               weight.dtype() == DType::kFp8E4M3 && k % 16 == 0 && x.stride(0) % 16 == 0 &&
               x_scale != nullptr && weight_scale != nullptr,
           ErrorCode::kInvalidArgument, "linear_fp8: x ", x.describe(), " · weightᵀ ",
           weight.describe(), " → y ", y.describe(), " over ", rows,
           " rows does not fit (fp8 operands, K and x's row stride multiples of 16, both scales)");
  if (rows == 0) return;
  const auto workspace_bytes =
      workspace_.defined() ? static_cast<std::size_t>(workspace_.span_bytes()) : std::size_t{0};
  // The descriptors and the heuristic's choice, made once per shape, strides, output and
  // alignment (a step then only points them at its scales: nothing allocated per call).
  const Fp8Key key{n,
                   k,
                   rows,
                   x.stride(0),
                   y.stride(0),
                   y.dtype(),
                   beta != 0.0f,
                   alignment(weight.data()),
                   alignment(x.data()),
                   alignment(y.data())};
  auto cached = fp8_plans_.find(key);
  if (cached == fp8_plans_.end()) {
    cached = fp8_plans_.emplace(key, plan_fp8(key, workspace_bytes, weight_scale, x_scale)).first;
  }
  Fp8Plan& plan = *cached->second;
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, weight_scale);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, x_scale);
  const float alpha = 1.0f;
  FF_CUBLAS_CHECK(cublasLtMatmul(lt_, plan.desc, &alpha, weight.data(), plan.a, x.data(), plan.b,
                                 &beta, y.data(), plan.d, y.data(), plan.d, &plan.algo,
                                 workspace_.defined() ? workspace_.data() : nullptr,
                                 workspace_bytes, stream));
}

std::unique_ptr<Gemm::Fp8Plan> Gemm::plan_fp8(const Fp8Key& key, std::size_t workspace_bytes,
                                              const float* weight_scale, const float* x_scale) {
  // As in linear(): column-major yᵀ [n, rows] = weight (col-major [k, n], transposed) · xᵀ
  // (col-major [k, rows]), the "TN" layout cuBLASLt's fp8 GEMMs take. A's outer-vector scale
  // has one value per row of yᵀ (the weight's channels), B's one per column (the tokens).
  auto plan = std::make_unique<Fp8Plan>();
  Fp8Plan& m = *plan;
  const auto n = static_cast<std::uint64_t>(key.n), k = static_cast<std::uint64_t>(key.k);
  const auto rows = static_cast<std::uint64_t>(key.rows);
  FF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&m.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute(m.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attribute(m.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_attribute(m.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  set_attribute(m.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  // The heuristic refuses outer-vector scales it has no pointers for (INVALID_VALUE on
  // sm_90): it is asked with the first call's.
  set_attribute(m.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, weight_scale);
  set_attribute(m.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, x_scale);
  FF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&m.a, CUDA_R_8F_E4M3, k, n, key.k));
  FF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&m.b, CUDA_R_8F_E4M3, k, rows, key.x_stride));
  FF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&m.d, cuda_type(key.y_dtype), n, rows, key.y_stride));
  FF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&m.preference));
  FF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(m.preference,
                                                       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes, sizeof workspace_bytes));
  // The pointers' real alignment: an algorithm picked for better-aligned pointers (256 bytes
  // unless told) may not run on a column slice.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.weight_alignment},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.x_alignment},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.y_alignment},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.y_alignment}};
  for (const auto& [attribute, bytes] : alignments) {
    FF_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(m.preference, attribute, &bytes, sizeof bytes));
  }
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  FF_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_, m.desc, m.a, m.b, m.d, m.d, m.preference, 1,
                                                 &heuristic, &found));
  FF_CHECK(found > 0, ErrorCode::kUnsupported, "linear_fp8: cuBLASLt has no fp8 GEMM for ", key.n,
           " x ", key.k, " weights over ", key.rows, " rows into ", name_of(key.y_dtype),
           key.accumulate ? " (adding to it)" : "");
  plan->algo = heuristic.algo;
  return plan;
}

}  // namespace freezeframe
