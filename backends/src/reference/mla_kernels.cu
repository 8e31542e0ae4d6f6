// Reference MLA kernels: projections, rotary embedding with the latent cache write, query
// absorption and latent expansion.

#include <cuda_bf16.h>

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cmath>

#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/cuda_check.h"
#include "reference/mla_launch.h"

namespace freezeframe::reference {
namespace {

using kernels::from_float;
using kernels::to_float;

constexpr int kWarps = 8;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// The request holding `row` among [begin, end): the last r with start[r] <= row.
__device__ int find_request(const std::int32_t* start, int begin, int end, int row) {
  int lo = begin, hi = end - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (start[mid] <= row)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// --- projection: one warp per output element, lanes over k (coalesced weight reads) ---
template <typename XT, typename WT, typename OT>
__global__ void projection_kernel(const __grid_constant__ Projection p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + warp;
  const int row = blockIdx.y, b = blockIdx.z;
  if (n >= p.n_out) return;
  const XT* x = static_cast<const XT*>(p.x) + b * p.x_stride_batch + row * p.x_stride_row;
  const WT* w = static_cast<const WT*>(p.w) + b * p.w_stride_batch + n * p.w_stride_n;
  float acc = 0.0f;
  for (int k = lane; k < p.k; k += 32) acc += to_float(x[k]) * to_float(w[k]);
  acc = warp_sum(acc);
  if (lane == 0) {
    static_cast<OT*>(p.out)[b * p.out_stride_batch + row * p.out_stride_row + n] =
        from_float<OT>(acc);
  }
}

template <typename XT, typename WT, typename OT>
void run_projection(const Projection& p, cudaStream_t stream) {
  const dim3 grid((p.n_out + kWarps - 1) / kWarps, p.rows, p.batch);
  projection_kernel<XT, WT, OT><<<grid, kWarps * 32, 0, stream>>>(p);
  FF_CHECK_LAUNCH();
}

// --- rotary embedding and latent cache write: one CTA per token row ---
constexpr int kMaxRopePairs = 32;

struct RopeCacheParams {
  float* q;
  std::int64_t q_stride_token, q_stride_head;
  const void* kv_c;
  std::int64_t kv_c_stride_token;
  const void* k_pe;
  std::int64_t k_pe_stride_token;
  void* cache;
  std::int64_t cache_stride_block, cache_stride_token;
  const std::int32_t* query_start_loc;
  const std::int32_t* seq_lens;
  const std::int32_t* first_positions;  // null: seq_len − new tokens
  const std::int64_t* slot_mapping;
  int num_reqs, num_heads, nope, rope, kv_lora_rank, block_size;
  float inv_freq[kMaxRopePairs];  // one per rotary pair (MlaParams::rope_inv_freq or theta's)
  float rope_scale;               // what rotated values are multiplied by (YaRN)
  float cache_inv_scale;          // what cached values are multiplied by (1 / an fp8 cache's scale)
};

__device__ void rotate(float& x0, float& x1, int pos, float inv_freq, float scale) {
  float s, c;
  sincosf(static_cast<float>(pos) * inv_freq, &s, &c);
  const float r0 = (x0 * c - x1 * s) * scale, r1 = (x0 * s + x1 * c) * scale;
  x0 = r0;
  x1 = r1;
}

template <typename T, typename CacheT>
__global__ void rope_and_cache_kernel(const __grid_constant__ RopeCacheParams p) {
  const int row = blockIdx.x;
  if (row >= p.query_start_loc[p.num_reqs]) return;  // padding
  const int req = find_request(p.query_start_loc, 0, p.num_reqs, row);
  const int query_len = p.query_start_loc[req + 1] - p.query_start_loc[req];
  const int first =
      p.first_positions != nullptr ? p.first_positions[req] : p.seq_lens[req] - query_len;
  const int pos = first + (row - p.query_start_loc[req]);
  const int half = p.rope / 2;

  for (int idx = threadIdx.x; idx < p.num_heads * half; idx += blockDim.x) {
    const int head = idx / half, pair = idx % half;
    float* q = p.q + row * p.q_stride_token + head * p.q_stride_head + p.nope + 2 * pair;
    rotate(q[0], q[1], pos, p.inv_freq[pair], p.rope_scale);
  }

  const std::int64_t slot = p.slot_mapping[row];
  if (slot < 0) return;
  CacheT* latent = static_cast<CacheT*>(p.cache) + (slot / p.block_size) * p.cache_stride_block +
                   (slot % p.block_size) * p.cache_stride_token;
  const float inv = p.cache_inv_scale;  // 1 for a 16-bit cache: a copy, bit for bit
  const T* kv_c = static_cast<const T*>(p.kv_c) + row * p.kv_c_stride_token;
  for (int c = threadIdx.x; c < p.kv_lora_rank; c += blockDim.x) {
    latent[c] = from_float<CacheT>(to_float(kv_c[c]) * inv);
  }
  const T* k_pe = static_cast<const T*>(p.k_pe) + row * p.k_pe_stride_token;
  for (int pair = threadIdx.x; pair < half; pair += blockDim.x) {
    float x0 = to_float(k_pe[2 * pair]), x1 = to_float(k_pe[2 * pair + 1]);
    rotate(x0, x1, pos, p.inv_freq[pair], p.rope_scale);
    latent[p.kv_lora_rank + 2 * pair] = from_float<CacheT>(x0 * inv);
    latent[p.kv_lora_rank + 2 * pair + 1] = from_float<CacheT>(x1 * inv);
  }
}

// --- query absorption: one CTA per (decode row, head) ---
struct AbsorbParams {
  const float* q;
  std::int64_t q_stride_token, q_stride_head;
  const void* kv_b_proj;  // [H·(nope + v), R]
  float* q_abs;
  std::int64_t q_abs_stride_token, q_abs_stride_head;
  int nope, rope, v, kv_lora_rank;
};

template <typename WT>
__global__ void absorb_query_kernel(const __grid_constant__ AbsorbParams p) {
  __shared__ float s_nope[512];
  const int row = blockIdx.x, head = blockIdx.y;
  const float* q = p.q + row * p.q_stride_token + head * p.q_stride_head;
  for (int d = threadIdx.x; d < p.nope; d += blockDim.x) s_nope[d] = q[d];
  __syncthreads();
  const WT* w_uk = static_cast<const WT*>(p.kv_b_proj) +
                   static_cast<std::int64_t>(head) * (p.nope + p.v) * p.kv_lora_rank;
  float* out = p.q_abs + row * p.q_abs_stride_token + head * p.q_abs_stride_head;
  for (int c = threadIdx.x; c < p.kv_lora_rank; c += blockDim.x) {
    float acc = 0.0f;
    for (int d = 0; d < p.nope; ++d) acc += s_nope[d] * to_float(w_uk[d * p.kv_lora_rank + c]);
    out[c] = acc;
  }
  for (int i = threadIdx.x; i < p.rope; i += blockDim.x) out[p.kv_lora_rank + i] = q[p.nope + i];
}

// --- latent expansion for prefill: a fixed grid strides over context rows ---
struct ExpandParams {
  const void* cache;
  std::int64_t cache_stride_block, cache_stride_token;
  const void* kv_b_proj;
  const std::int32_t* seq_start_loc;
  const std::int32_t* block_table;
  int block_table_stride, block_size;
  int num_decodes, num_reqs;
  float* k_exp;
  std::int64_t k_stride_token, k_stride_head;
  float* v_exp;
  std::int64_t v_stride_token, v_stride_head;
  int num_heads, nope, rope, v, kv_lora_rank;
};

constexpr int kExpandGrid = 264;  // two waves of an H100/H200's 132 SMs

template <typename T>
__global__ void expand_latent_kernel(const __grid_constant__ ExpandParams p) {
  __shared__ float s_latent[1024];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first = p.seq_start_loc[p.num_decodes];
  const int total = p.seq_start_loc[p.num_reqs] - first;
  const int outputs = p.num_heads * (p.nope + p.v);
  const T* weights = static_cast<const T*>(p.kv_b_proj);
  for (int j = blockIdx.x; j < total; j += gridDim.x) {
    const int req = find_request(p.seq_start_loc, p.num_decodes, p.num_reqs, first + j);
    const int pos = first + j - p.seq_start_loc[req];
    const int block =
        p.block_table[static_cast<std::int64_t>(req) * p.block_table_stride + pos / p.block_size];
    const T* latent = static_cast<const T*>(p.cache) + block * p.cache_stride_block +
                      (pos % p.block_size) * p.cache_stride_token;
    __syncthreads();  // the previous row's readers are done with s_latent
    for (int c = threadIdx.x; c < p.kv_lora_rank + p.rope; c += blockDim.x) {
      s_latent[c] = to_float(latent[c]);
    }
    __syncthreads();
    for (int o = warp; o < outputs; o += kWarps) {
      const int head = o / (p.nope + p.v), n = o % (p.nope + p.v);
      const T* w = weights + static_cast<std::int64_t>(o) * p.kv_lora_rank;
      float acc = 0.0f;
      for (int c = lane; c < p.kv_lora_rank; c += 32) acc += to_float(w[c]) * s_latent[c];
      acc = warp_sum(acc);
      if (lane == 0) {
        if (n < p.nope) {
          p.k_exp[j * p.k_stride_token + head * p.k_stride_head + n] = acc;
        } else {
          p.v_exp[j * p.v_stride_token + head * p.v_stride_head + (n - p.nope)] = acc;
        }
      }
    }
    for (int idx = threadIdx.x; idx < p.num_heads * p.rope; idx += blockDim.x) {
      const int head = idx / p.rope, i = idx % p.rope;
      p.k_exp[j * p.k_stride_token + head * p.k_stride_head + p.nope + i] =
          s_latent[p.kv_lora_rank + i];
    }
  }
}

[[noreturn]] void unsupported_dtype(const char* what, DType dtype) {
  FF_THROW(ErrorCode::kUnsupported, "reference MLA: no kernel for ", what, " of dtype ",
           name_of(dtype));
}

}  // namespace

void launch_projection(const Projection& p, cudaStream_t stream) {
  if (p.rows == 0 || p.n_out == 0 || p.batch == 0) return;
  using bf16 = __nv_bfloat16;
  const DType x = p.x_dtype, w = p.w_dtype, o = p.out_dtype;
  if (x == DType::kBF16 && w == DType::kBF16 && o == DType::kF32)
    return run_projection<bf16, bf16, float>(p, stream);
  if (x == DType::kF16 && w == DType::kF16 && o == DType::kF32)
    return run_projection<__half, __half, float>(p, stream);
  if (x == DType::kF32 && w == DType::kBF16 && o == DType::kBF16)
    return run_projection<float, bf16, bf16>(p, stream);
  if (x == DType::kF32 && w == DType::kF16 && o == DType::kF16)
    return run_projection<float, __half, __half>(p, stream);
  FF_THROW(ErrorCode::kUnsupported, "reference MLA: no projection kernel for ", name_of(x), " × ",
           name_of(w), " → ", name_of(o));
}

void launch_mla_rope_and_cache(const MlaParams& params, const TensorView& q,
                               const TensorView& kv_c_normed, const TensorView& k_pe,
                               const TensorView& kv_cache, const AttentionMetadata& md,
                               const std::int32_t* first_positions, float cache_scale,
                               cudaStream_t stream) {
  if (md.num_tokens == 0) return;
  FF_CHECK(std::isfinite(cache_scale) && cache_scale > 0.0f, ErrorCode::kInvalidArgument,
           "the latent cache's scale must be positive and finite, got ", cache_scale);
  RopeCacheParams p{};
  p.cache_inv_scale = kv_cache.dtype() == DType::kFp8E4M3 ? 1.0f / cache_scale : 1.0f;
  p.first_positions = first_positions;
  p.q = q.data_as<float>();
  p.q_stride_token = q.stride(0);
  p.q_stride_head = q.stride(1);
  p.kv_c = kv_c_normed.data();
  p.kv_c_stride_token = kv_c_normed.stride(0);
  p.k_pe = k_pe.data();
  p.k_pe_stride_token = k_pe.stride(0);
  p.cache = kv_cache.data();
  p.cache_stride_block = kv_cache.stride(0);
  p.cache_stride_token = kv_cache.stride(1);
  p.query_start_loc = md.query_start_loc;
  p.seq_lens = md.seq_lens;
  p.slot_mapping = md.slot_mapping;
  p.num_reqs = md.num_reqs;
  p.num_heads = params.num_heads;
  p.nope = params.qk_nope_head_dim;
  p.rope = params.qk_rope_head_dim;
  p.kv_lora_rank = params.kv_lora_rank;
  p.block_size = static_cast<int>(kv_cache.size(1));
  const int pairs = params.qk_rope_head_dim / 2;
  FF_CHECK(pairs <= kMaxRopePairs, ErrorCode::kUnsupported, "reference MLA rotates up to ",
           2 * kMaxRopePairs, " dimensions, got ", params.qk_rope_head_dim);
  for (int i = 0; i < pairs; ++i) {
    p.inv_freq[i] = params.rope_inv_freq.empty()
                        ? static_cast<float>(std::pow(static_cast<double>(params.rope_theta),
                                                      -2.0 * i / params.qk_rope_head_dim))
                        : params.rope_inv_freq[static_cast<std::size_t>(i)];
  }
  p.rope_scale = params.rope_scale;
  const DType in = kv_c_normed.dtype(), cache = kv_cache.dtype();
  FF_CHECK(k_pe.dtype() == in && (in == DType::kBF16 || in == DType::kF16) &&
               (cache == in || cache == DType::kFp8E4M3),
           ErrorCode::kUnsupported, "MLA: no cache write of ", name_of(in), " into a ",
           name_of(cache), " latent cache");
  const dim3 grid(md.num_tokens);
  if (cache == DType::kFp8E4M3) {
    if (in == DType::kBF16) {
      rope_and_cache_kernel<__nv_bfloat16, __nv_fp8_e4m3><<<grid, 128, 0, stream>>>(p);
    } else {
      rope_and_cache_kernel<__half, __nv_fp8_e4m3><<<grid, 128, 0, stream>>>(p);
    }
  } else if (in == DType::kBF16) {
    rope_and_cache_kernel<__nv_bfloat16, __nv_bfloat16><<<grid, 128, 0, stream>>>(p);
  } else {
    rope_and_cache_kernel<__half, __half><<<grid, 128, 0, stream>>>(p);
  }
  FF_CHECK_LAUNCH();
}

void launch_mla_absorb_query(const MlaParams& params, const TensorView& q,
                             const TensorView& kv_b_proj, const TensorView& q_abs, int rows,
                             cudaStream_t stream) {
  if (rows == 0) return;
  FF_CHECK(params.qk_nope_head_dim <= 512, ErrorCode::kUnsupported,
           "reference MLA supports qk_nope_head_dim up to 512");
  AbsorbParams p{};
  p.q = q.data_as<const float>();
  p.q_stride_token = q.stride(0);
  p.q_stride_head = q.stride(1);
  p.kv_b_proj = kv_b_proj.data();
  p.q_abs = q_abs.data_as<float>();
  p.q_abs_stride_token = q_abs.stride(0);
  p.q_abs_stride_head = q_abs.stride(1);
  p.nope = params.qk_nope_head_dim;
  p.rope = params.qk_rope_head_dim;
  p.v = params.v_head_dim;
  p.kv_lora_rank = params.kv_lora_rank;
  const dim3 grid(rows, params.num_heads);
  if (kv_b_proj.dtype() == DType::kBF16) {
    absorb_query_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(p);
  } else if (kv_b_proj.dtype() == DType::kF16) {
    absorb_query_kernel<__half><<<grid, 128, 0, stream>>>(p);
  } else {
    unsupported_dtype("kv_b_proj", kv_b_proj.dtype());
  }
  FF_CHECK_LAUNCH();
}

void launch_mla_expand_latent(const MlaParams& params, const TensorView& kv_cache,
                              const TensorView& kv_b_proj, const AttentionMetadata& md,
                              const TensorView& k_exp, const TensorView& v_exp,
                              cudaStream_t stream) {
  FF_CHECK(params.latent_size() <= 1024, ErrorCode::kUnsupported,
           "reference MLA supports kv_lora_rank + qk_rope_head_dim up to 1024");
  FF_CHECK(kv_b_proj.dtype() == kv_cache.dtype(), ErrorCode::kUnsupported,
           "reference MLA expects kv_b_proj and the latent cache in one dtype, got ",
           name_of(kv_b_proj.dtype()), " and ", name_of(kv_cache.dtype()));
  if (md.num_decodes == md.num_reqs) return;
  ExpandParams p{};
  p.cache = kv_cache.data();
  p.cache_stride_block = kv_cache.stride(0);
  p.cache_stride_token = kv_cache.stride(1);
  p.kv_b_proj = kv_b_proj.data();
  p.seq_start_loc = md.seq_start_loc;
  p.block_table = md.block_table;
  p.block_table_stride = md.block_table_stride;
  p.block_size = static_cast<int>(kv_cache.size(1));
  p.num_decodes = md.num_decodes;
  p.num_reqs = md.num_reqs;
  p.k_exp = k_exp.data_as<float>();
  p.k_stride_token = k_exp.stride(0);
  p.k_stride_head = k_exp.stride(1);
  p.v_exp = v_exp.data_as<float>();
  p.v_stride_token = v_exp.stride(0);
  p.v_stride_head = v_exp.stride(1);
  p.num_heads = params.num_heads;
  p.nope = params.qk_nope_head_dim;
  p.rope = params.qk_rope_head_dim;
  p.v = params.v_head_dim;
  p.kv_lora_rank = params.kv_lora_rank;
  if (kv_cache.dtype() == DType::kBF16) {
    expand_latent_kernel<__nv_bfloat16><<<kExpandGrid, kWarps * 32, 0, stream>>>(p);
  } else if (kv_cache.dtype() == DType::kF16) {
    expand_latent_kernel<__half><<<kExpandGrid, kWarps * 32, 0, stream>>>(p);
  } else {
    unsupported_dtype("the latent cache", kv_cache.dtype());
  }
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::reference
