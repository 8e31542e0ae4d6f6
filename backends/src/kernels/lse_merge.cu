#include "freezeframe/backends/lse_merge.h"

#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/cuda_check.h"
#include "kernels/merge_state.cuh"

namespace freezeframe {
namespace {

using kernels::from_float;
using kernels::to_float;

struct MergeParams {
  const void* partial_out;
  std::int64_t part_stride_out, token_stride_out, head_stride_out;  // elements
  const float* partial_lse;
  std::int64_t part_stride_lse, token_stride_lse;
  void* out;
  std::int64_t out_stride_token, out_stride_head;
  float* out_lse;  // may be null
  std::int64_t out_lse_stride_token;
  int num_parts, head_size;
};

// One CTA per (token, head); threads over head_size. See Note [LSE merge numerics].
template <typename InT, typename OutT>
__global__ void merge_kernel(const __grid_constant__ MergeParams p) {
  const int token = blockIdx.x, head = blockIdx.y;
  auto lse = [&](int r) {
    return p.partial_lse[r * p.part_stride_lse + token * p.token_stride_lse + head];
  };
  const float m = kernels::max_lse(p.num_parts, lse);
  auto* out = static_cast<OutT*>(p.out) + token * p.out_stride_token + head * p.out_stride_head;
  float* out_lse = p.out_lse != nullptr && threadIdx.x == 0
                       ? p.out_lse + token * p.out_lse_stride_token + head
                       : nullptr;
  if (m == -INFINITY) {  // no part saw a key
    for (int d = threadIdx.x; d < p.head_size; d += blockDim.x) out[d] = from_float<OutT>(0.0f);
    if (out_lse != nullptr) *out_lse = -INFINITY;
    return;
  }
  const float sum = kernels::weight_sum(p.num_parts, m, lse);
  const auto* in = static_cast<const InT*>(p.partial_out) + token * p.token_stride_out +
                   head * p.head_stride_out;
  for (int d = threadIdx.x; d < p.head_size; d += blockDim.x) {
    auto part = [&](int r) { return to_float(in[r * p.part_stride_out + d]); };
    out[d] = from_float<OutT>(kernels::merged_value(p.num_parts, m, sum, lse, part));
  }
  if (out_lse != nullptr) *out_lse = m + logf(sum);
}

template <typename InT, typename OutT>
void launch(const MergeParams& p, int tokens, int heads, cudaStream_t stream) {
  merge_kernel<InT, OutT><<<dim3(tokens, heads), 128, 0, stream>>>(p);
  FF_CHECK_LAUNCH();
}

}  // namespace

void merge_attention_states(const TensorView& partial_out, const TensorView& partial_lse_ln,
                            const TensorView& out, const TensorView& out_lse_ln,
                            cudaStream_t stream) {
  using E = ErrorCode;
  FF_CHECK(partial_out.defined() && partial_out.is_cuda() && partial_out.dim() == 4,
           E::kInvalidArgument,
           "partial_out must be a device tensor [parts, tokens, heads, "
           "head_size], got ",
           partial_out.defined() ? partial_out.describe() : "nothing");
  const std::int64_t parts = partial_out.size(0), tokens = partial_out.size(1),
                     heads = partial_out.size(2), head_size = partial_out.size(3);
  FF_CHECK(partial_lse_ln.defined() && partial_lse_ln.is_cuda() &&
               partial_lse_ln.dtype() == DType::kF32 && partial_lse_ln.dim() == 3 &&
               partial_lse_ln.size(0) == parts && partial_lse_ln.size(1) == tokens &&
               partial_lse_ln.size(2) == heads && partial_lse_ln.stride(2) == 1,
           E::kInvalidArgument, "partial_lse_ln must be a device f32 tensor [", parts, ", ", tokens,
           ", ", heads, "], got ",
           partial_lse_ln.defined() ? partial_lse_ln.describe() : "nothing");
  FF_CHECK(out.defined() && out.is_cuda() && out.dim() == 3 && out.size(0) == tokens &&
               out.size(1) == heads && out.size(2) == head_size && out.stride(2) == 1,
           E::kInvalidArgument, "out must be a device tensor [", tokens, ", ", heads, ", ",
           head_size, "], got ", out.defined() ? out.describe() : "nothing");
  FF_CHECK(partial_out.stride(3) == 1, E::kInvalidArgument,
           "partial_out needs unit stride over head_size");
  if (out_lse_ln.defined()) {
    FF_CHECK(out_lse_ln.is_cuda() && out_lse_ln.dtype() == DType::kF32 && out_lse_ln.dim() == 2 &&
                 out_lse_ln.size(0) == tokens && out_lse_ln.size(1) == heads &&
                 out_lse_ln.stride(1) == 1,
             E::kInvalidArgument, "out_lse_ln must be a device f32 tensor [", tokens, ", ", heads,
             "], got ", out_lse_ln.describe());
  }
  FF_CHECK(parts >= 1, E::kInvalidArgument, "nothing to merge: partial_out has no parts");
  if (tokens == 0 || heads == 0) return;

  MergeParams p{};
  p.partial_out = partial_out.data();
  p.part_stride_out = partial_out.stride(0);
  p.token_stride_out = partial_out.stride(1);
  p.head_stride_out = partial_out.stride(2);
  p.partial_lse = partial_lse_ln.data_as<const float>();
  p.part_stride_lse = partial_lse_ln.stride(0);
  p.token_stride_lse = partial_lse_ln.stride(1);
  p.out = out.data();
  p.out_stride_token = out.stride(0);
  p.out_stride_head = out.stride(1);
  p.out_lse = out_lse_ln.defined() ? out_lse_ln.data_as<float>() : nullptr;
  p.out_lse_stride_token = out_lse_ln.defined() ? out_lse_ln.stride(0) : 0;
  p.num_parts = static_cast<int>(parts);
  p.head_size = static_cast<int>(head_size);

  const DType in = partial_out.dtype(), o = out.dtype();
  const int t = static_cast<int>(tokens), h = static_cast<int>(heads);
  if (in == DType::kF32 && o == DType::kF32) return launch<float, float>(p, t, h, stream);
  if (in == DType::kF32 && o == DType::kBF16) return launch<float, __nv_bfloat16>(p, t, h, stream);
  if (in == DType::kF32 && o == DType::kF16) return launch<float, __half>(p, t, h, stream);
  if (in == DType::kBF16 && o == DType::kBF16)
    return launch<__nv_bfloat16, __nv_bfloat16>(p, t, h, stream);
  if (in == DType::kF16 && o == DType::kF16) return launch<__half, __half>(p, t, h, stream);
  FF_THROW(E::kUnsupported, "merging ", name_of(in), " partial outputs into ", name_of(o),
           " is not supported");
}

}  // namespace freezeframe
