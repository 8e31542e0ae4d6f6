#include "runtime/gemm.h"

#include <string>

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

}  // namespace

Gemm::Gemm(const TensorView& workspace) : workspace_(workspace) {
  FF_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    // Deterministic results: the same step gives the same bits in a graph and eagerly.
    FF_CUBLAS_CHECK(cublasSetAtomicsMode(handle_, CUBLAS_ATOMICS_NOT_ALLOWED));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

Gemm::~Gemm() {
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

}  // namespace freezeframe
