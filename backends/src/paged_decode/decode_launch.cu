// Head-size dispatch of the decode kernel, and the split combine.

#include "freezeframe/core/cuda_check.h"
#include "kernels/head_sizes.h"
#include "kernels/merge_state.cuh"
#include "paged_decode/decode_kernel.cuh"
#include "paged_decode/decode_launch.h"

namespace freezeframe::paged_decode {
namespace {

// One CTA per (row, head): merge the splits of decode rows that have keys (split_range);
// other rows are not ours. The splits' weights exp(L_r − L) are computed once into shared
// memory, then every thread sums its output elements.
template <typename T>
__global__ void combine_kernel(const __grid_constant__ DecodeParams p, int head_size) {
  __shared__ float s_weight[kMaxSplits];
  __shared__ float s_lse;
  const int row = blockIdx.x, head = blockIdx.y;
  const int req = decode_request(p.query_start_loc, p.num_reqs, row);
  if (req < 0) return;
  const int splits = split_range(p.seq_lens[req], p.sliding_window, p.num_splits).active;
  const std::int64_t stride = static_cast<std::int64_t>(p.num_rows) * p.num_heads;
  const std::int64_t state = static_cast<std::int64_t>(row) * p.num_heads + head;
  if (threadIdx.x == 0) {
    auto lse = [&](int r) { return p.partial_lse[r * stride + state]; };
    const float m = kernels::max_lse(splits, lse);
    const float sum = m == -INFINITY ? 0.0f : kernels::weight_sum(splits, m, lse);
    for (int r = 0; r < splits; ++r) s_weight[r] = sum > 0.0f ? expf(lse(r) - m) / sum : 0.0f;
    s_lse = sum > 0.0f ? m + logf(sum) : -INFINITY;
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out) + row * p.out_stride_token + head * p.out_stride_head;
  for (int d = threadIdx.x; d < head_size; d += blockDim.x) {
    float acc = 0.0f;  // all weights 0 (no split saw a key) gives 0, never NaN
    for (int r = 0; r < splits; ++r)
      acc += s_weight[r] * p.partial_out[(r * stride + state) * head_size + d];
    out[d] = kernels::from_float<T>(acc);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) p.lse[row * p.lse_stride_token + head] = s_lse;
}

}  // namespace

DecodeKernel decode_kernel(DType dtype, DType kv_dtype, int head_size, int heads_per_cta) {
  DecodeKernel kernel = nullptr;
  const bool compiled = kernels::with_head_size(head_size, [&]<int D>() {
    kernel = decode_kernel_for_head_size<D>(dtype, kv_dtype, heads_per_cta);
  });
  FF_CHECK(compiled, ErrorCode::kUnsupported, "paged_decode: no kernel for head size ", head_size);
  return kernel;
}

void launch_decode(const DecodeParams& p, DType dtype, DType kv_dtype, int head_size,
                   int heads_per_cta, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  const DecodeKernel kernel = decode_kernel(dtype, kv_dtype, head_size, heads_per_cta);
  const dim3 grid(p.num_splits, p.num_heads / heads_per_cta, p.num_rows);
  kernel<<<grid, kThreads, 0, stream>>>(p);
  FF_CHECK_LAUNCH();
}

int resident_ctas_per_sm(DType dtype, DType kv_dtype, int head_size, int heads_per_cta) {
  int ctas = 0;
  FF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &ctas, decode_kernel(dtype, kv_dtype, head_size, heads_per_cta), kThreads, 0));
  return ctas;
}

void launch_combine(const DecodeParams& p, DType dtype, int head_size, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  const dim3 grid(p.num_rows, p.num_heads);
  if (dtype == DType::kBF16) {
    combine_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(p, head_size);
  } else if (dtype == DType::kF16) {
    combine_kernel<__half><<<grid, 128, 0, stream>>>(p, head_size);
  } else {
    FF_THROW(ErrorCode::kUnsupported, "paged_decode: no combine for ", name_of(dtype));
  }
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::paged_decode
