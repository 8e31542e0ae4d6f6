// The routed experts' kernels (moe_kernels.h). The grouped GEMM is tiled 64 × 64 over each
// expert's rows in moe_sort's order: a CTA finds its expert and rows from the sorted ids alone
// (the grid covers the most tiles any routing can need), gathers its rows of the input, and
// multiplies them by that expert's weights on mma.sync (16-bit operands, f32 accumulation).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "freezeframe/core/cuda_check.h"
#include "runtime/kernel_support.cuh"
#include "runtime/moe_kernels.h"

namespace freezeframe::model_kernels {
namespace {

using namespace detail;
using E = ErrorCode;

constexpr int kMaxExperts = 256;  // DeepSeek-V3 has 256, V2 160
constexpr int kMaxExpertsPerToken = 64;

// ---------------------------------------------------------------------------------------------
// moe_route: one warp per row; the row's scores in shared memory.

constexpr int kRouteWarps = 4;

struct RouteParams {
  const float* logits;
  std::int64_t logits_stride;
  std::int32_t* topk_ids;
  float* topk_weights;
  int num_experts, k, num_groups, top_groups;
  float scaling;
  int rows;
};

/// The lane's best (value, index) merged across the warp: the higher value, the lower index
/// among equal ones.
__device__ __forceinline__ void warp_argmax(float& value, int& index) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, index, offset);
    if (v > value || (v == value && i < index)) {
      value = v;
      index = i;
    }
  }
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const __grid_constant__ RouteParams p) {
  __shared__ float s_scores[kRouteWarps][kMaxExperts];
  __shared__ float s_candidates[kRouteWarps][kMaxExperts];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRouteWarps + warp;
  if (row >= p.rows) return;  // whole warps only: no block-wide barrier below
  float* scores = s_scores[warp];
  float* candidates = s_candidates[warp];
  const float* logits = p.logits + row * p.logits_stride;
  const int n = p.num_experts;

  float best = -INFINITY;
  for (int e = lane; e < n; e += 32) best = fmaxf(best, logits[e]);
  best = warp_max(best);
  float sum = 0.0f;
  for (int e = lane; e < n; e += 32) {
    const float x = expf(logits[e] - best);
    scores[e] = x;
    sum += x;
  }
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  for (int e = lane; e < n; e += 32) {
    scores[e] *= inv;
    candidates[e] = scores[e];
  }
  __syncwarp();
  // Group-limited: the experts of groups outside the best top_groups score 0 (the chosen ones
  // keep theirs), then the top k are taken among all, as transformers masks them.
  if (p.num_groups > 1) {
    const int group_size = n / p.num_groups;
    __shared__ float s_group_best[kRouteWarps][kMaxExperts];
    float* group_best = s_group_best[warp];
    for (int g = lane; g < p.num_groups; g += 32) {
      float m = -INFINITY;
      for (int i = 0; i < group_size; ++i) m = fmaxf(m, scores[g * group_size + i]);
      group_best[g] = m;
    }
    __syncwarp();
    // Group g is kept when fewer than top_groups groups beat it (ties: the lower index wins).
    for (int g = lane; g < p.num_groups; g += 32) {
      int better = 0;
      for (int h = 0; h < p.num_groups; ++h) {
        better += group_best[h] > group_best[g] || (group_best[h] == group_best[g] && h < g);
      }
      if (better >= p.top_groups) {
        for (int i = 0; i < group_size; ++i) candidates[g * group_size + i] = 0.0f;
      }
    }
    __syncwarp();
  }
  for (int j = 0; j < p.k; ++j) {
    float value = -INFINITY;
    int index = n;
    for (int e = lane; e < n; e += 32) {
      if (candidates[e] > value) {
        value = candidates[e];
        index = e;
      }
    }
    warp_argmax(value, index);
    if (lane == 0) {
      p.topk_ids[row * p.k + j] = index;
      p.topk_weights[row * p.k + j] = value * p.scaling;
      candidates[index] = -INFINITY;  // taken
    }
    __syncwarp();
  }
}

// ---------------------------------------------------------------------------------------------
// moe_sort: one CTA; counts per expert in shared memory, their exclusive scan, then each row
// placed at its expert's next free position.

constexpr int kSortThreads = 1024;

__global__ void __launch_bounds__(kSortThreads)
    moe_sort_kernel(const std::int32_t* ids, int count, int num_experts, std::int32_t* sorted_ids,
                    std::int32_t* sorted_rows) {
  using Scan = cub::BlockScan<int, kSortThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int s_cursor[kMaxExperts];
  for (int e = threadIdx.x; e < num_experts; e += kSortThreads) s_cursor[e] = 0;
  __syncthreads();
  for (int r = threadIdx.x; r < count; r += kSortThreads) atomicAdd(&s_cursor[ids[r]], 1);
  __syncthreads();
  const int mine = threadIdx.x < num_experts ? s_cursor[threadIdx.x] : 0;
  int offset = 0;
  Scan(scan_storage).ExclusiveSum(mine, offset);
  __syncthreads();
  if (threadIdx.x < num_experts) s_cursor[threadIdx.x] = offset;
  __syncthreads();
  for (int r = threadIdx.x; r < count; r += kSortThreads) {
    const int e = ids[r];
    const int position = atomicAdd(&s_cursor[e], 1);
    sorted_ids[position] = e;
    sorted_rows[position] = r;
  }
}

// ---------------------------------------------------------------------------------------------
// moe_grouped_gemm

constexpr int kTileM = 64, kTileN = 64, kTileK = 32;
constexpr int kGemmThreads = 128;        // 4 warps, 2 × 2, each 32 × 32 of the tile
constexpr int kSmemStride = kTileK + 8;  // halves a shared row: 80 bytes, conflict-free ldmatrix

struct GroupedGemmParams {
  const void* in;
  std::int64_t in_stride;
  int in_divisor;
  const std::int32_t* sorted_ids;
  const std::int32_t* sorted_rows;
  int count;
  int num_experts;
  const void* weights[kMaxExperts];
  int n, k;
  void* out;
  std::int64_t out_stride;
};

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* address) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// The first position of expert `e` in sorted ids [0, count) (count when none is ≥ e).
__device__ int lower_bound(const std::int32_t* ids, int count, int e) {
  int lo = 0, hi = count;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ids[mid] < e) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

template <typename T>
__global__ void __launch_bounds__(kGemmThreads)
    moe_grouped_gemm_kernel(const __grid_constant__ GroupedGemmParams p) {
  __shared__ int s_offsets[kMaxExperts + 1];  // each expert's first position
  __shared__ int s_tiles[kMaxExperts + 1];    // each expert's first tile
  __shared__ int s_in_row[kTileM], s_out_row[kTileM];
  __shared__ __align__(16) T s_a[kTileM][kSmemStride];
  __shared__ __align__(16) T s_b[kTileN][kSmemStride];

  const int e_count = p.num_experts;
  for (int e = threadIdx.x; e <= e_count; e += kGemmThreads) {
    s_offsets[e] = e == e_count ? p.count : lower_bound(p.sorted_ids, p.count, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    s_tiles[0] = 0;
    for (int e = 0; e < e_count; ++e) {
      s_tiles[e + 1] = s_tiles[e] + (s_offsets[e + 1] - s_offsets[e] + kTileM - 1) / kTileM;
    }
  }
  __syncthreads();
  const int tile = blockIdx.x;
  if (tile >= s_tiles[e_count]) return;  // more tiles launched than this routing has
  int expert = 0;                        // the last expert whose first tile is ≤ tile
  for (int lo = 0, hi = e_count - 1; lo <= hi;) {
    const int mid = (lo + hi) / 2;
    if (s_tiles[mid] <= tile) {
      expert = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  const int first = s_offsets[expert] + (tile - s_tiles[expert]) * kTileM;
  const int rows = min(kTileM, s_offsets[expert + 1] - first);
  for (int r = threadIdx.x; r < kTileM; r += kGemmThreads) {
    const int row = r < rows ? p.sorted_rows[first + r] : 0;
    s_out_row[r] = row;
    s_in_row[r] = row / p.in_divisor;
  }
  __syncthreads();

  const T* in = static_cast<const T*>(p.in);
  const T* weight = static_cast<const T*>(p.weights[expert]);
  const int n0 = blockIdx.y * kTileN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / 2, warp_n = warp % 2;
  float acc[2][4][4] = {};

  // 64 rows × 4 chunks of 8 values for each operand: two chunks a thread; rows past the tile,
  // columns past n and values past k are zeros. The next tile's chunks are loaded into
  // registers while the current one is multiplied.
  constexpr int kChunks = kTileM * (kTileK / 8) / kGemmThreads;
  uint4 a_next[kChunks], b_next[kChunks];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = threadIdx.x + i * kGemmThreads;
      const int r = c / (kTileK / 8), col = (c % (kTileK / 8)) * 8;
      const bool in_k = k0 + col < p.k;
      a_next[i] = make_uint4(0, 0, 0, 0);
      b_next[i] = make_uint4(0, 0, 0, 0);
      if (r < rows && in_k) {
        a_next[i] = *reinterpret_cast<const uint4*>(in + s_in_row[r] * p.in_stride + k0 + col);
      }
      if (n0 + r < p.n && in_k) {
        b_next[i] = *reinterpret_cast<const uint4*>(weight + std::int64_t(n0 + r) * p.k + k0 + col);
      }
    }
  };
  fetch(0);
  for (int k0 = 0; k0 < p.k; k0 += kTileK) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = threadIdx.x + i * kGemmThreads;
      const int r = c / (kTileK / 8), col = (c % (kTileK / 8)) * 8;
      *reinterpret_cast<uint4*>(&s_a[r][col]) = a_next[i];
      *reinterpret_cast<uint4*>(&s_b[r][col]) = b_next[i];
    }
    __syncthreads();
    if (k0 + kTileK < p.k) fetch(k0 + kTileK);
#pragma unroll
    for (int ks = 0; ks < kTileK; ks += 16) {
      std::uint32_t a_frag[2][4], b_frag[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ldmatrix_x4(a_frag[mi], &s_a[warp_m * 32 + mi * 16 + lane % 16][ks + (lane / 16) * 8]);
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        const int matrix = lane / 8;
        ldmatrix_x4(
            b_frag[nj],
            &s_b[warp_n * 32 + nj * 16 + lane % 8 + (matrix / 2) * 8][ks + (matrix % 2) * 8]);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const std::uint32_t(&b)[4] = b_frag[ni / 2];
          const int half = (ni % 2) * 2;
          mma_16816<T>(acc[mi][ni], a_frag[mi], b[half], b[half + 1]);
        }
      }
    }
    __syncthreads();
  }

  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int col = n0 + warp_n * 32 + ni * 8 + (lane % 4) * 2;
      if (col >= p.n) continue;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = warp_m * 32 + mi * 16 + lane / 4 + half * 8;
        if (r >= rows) continue;
        T* y = out + s_out_row[r] * p.out_stride + col;
        y[0] = from_float<T>(acc[mi][ni][half * 2]);
        y[1] = from_float<T>(acc[mi][ni][half * 2 + 1]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// moe_combine: one CTA per token row.

struct CombineParams {
  const void* expert_out;
  std::int64_t expert_stride;
  const float* weights;
  int k;
  void* hidden;
  std::int64_t hidden_stride;
  int width;
  bool accumulate;
};

template <typename TH, typename T>
__global__ void moe_combine_kernel(const __grid_constant__ CombineParams p) {
  const int t = blockIdx.x;
  const T* expert = static_cast<const T*>(p.expert_out) + std::int64_t(t) * p.k * p.expert_stride;
  const float* w = p.weights + std::int64_t(t) * p.k;
  TH* hidden = static_cast<TH*>(p.hidden) + t * p.hidden_stride;
  for (int c = threadIdx.x; c < p.width; c += blockDim.x) {
    float sum = 0.0f;
    for (int j = 0; j < p.k; ++j) sum += w[j] * to_float(expert[j * p.expert_stride + c]);
    hidden[c] = from_float<TH>(p.accumulate ? to_float(hidden[c]) + sum : sum);
  }
}

/// A device i32 or f32 [≥ rows, width] matrix with contiguous rows.
void check_table(const char* fn, const char* name, const TensorView& t, DType dtype,
                 std::int64_t rows, std::int64_t width) {
  FF_CHECK(t.defined() && t.is_cuda() && t.dtype() == dtype && t.dim() == 2 && t.size(0) >= rows &&
               t.size(1) == width && t.stride(1) == 1 && t.stride(0) == width,
           E::kInvalidArgument, fn, ": ", name, " must be a contiguous device ", name_of(dtype),
           " matrix [≥ ", rows, ", ", width, "], got ", describe(t));
}

/// A device i32 tensor of at least `count` contiguous elements.
void check_list(const char* fn, const char* name, const TensorView& t, std::int64_t count) {
  FF_CHECK(t.defined() && t.is_cuda() && t.dtype() == DType::kI32 && t.is_contiguous() &&
               t.numel() >= count,
           E::kInvalidArgument, fn, ": ", name, " must be a contiguous device i32 tensor of ≥ ",
           count, " elements, got ", describe(t));
}

}  // namespace

void moe_route(const TensorView& logits, const MoeRouting& routing, const TensorView& topk_ids,
               const TensorView& topk_weights, int rows, cudaStream_t stream) {
  constexpr const char* fn = "moe_route";
  check_rows_arg(fn, "rows", rows);
  FF_CHECK(logits.defined() && logits.is_cuda() && logits.dtype() == DType::kF32 &&
               logits.dim() == 2 && logits.size(0) >= rows && logits.stride(1) == 1,
           E::kInvalidArgument, fn, ": logits must be a device f32 matrix [≥ ", rows,
           ", experts] with unit column stride, got ", describe(logits));
  const std::int64_t experts = logits.size(1);
  const int k = routing.experts_per_token;
  FF_CHECK(experts >= 1 && experts <= kMaxExperts, E::kInvalidArgument, fn, ": ", experts,
           " experts; up to ", kMaxExperts, " are routed");
  FF_CHECK(k >= 1 && k <= experts && k <= kMaxExpertsPerToken, E::kInvalidArgument, fn, ": ", k,
           " experts a token of ", experts);
  FF_CHECK(routing.num_groups >= 1 && experts % routing.num_groups == 0 &&
               routing.top_groups >= 1 && routing.top_groups <= routing.num_groups &&
               k <= routing.top_groups * (experts / routing.num_groups),
           E::kInvalidArgument, fn, ": ", routing.num_groups, " groups (", routing.top_groups,
           " chosen) cannot hold ", k, " of ", experts, " experts");
  FF_CHECK(std::isfinite(routing.scaling) && routing.scaling > 0.0f, E::kInvalidArgument, fn,
           ": the scaling must be finite and > 0, got ", routing.scaling);
  check_table(fn, "topk_ids", topk_ids, DType::kI32, rows, k);
  check_table(fn, "topk_weights", topk_weights, DType::kF32, rows, k);
  if (rows == 0) return;
  RouteParams p{};
  p.logits = logits.data_as<const float>();
  p.logits_stride = logits.stride(0);
  p.topk_ids = topk_ids.data_as<std::int32_t>();
  p.topk_weights = topk_weights.data_as<float>();
  p.num_experts = static_cast<int>(experts);
  p.k = k;
  p.num_groups = routing.num_groups;
  p.top_groups = routing.top_groups;
  p.scaling = routing.scaling;
  p.rows = rows;
  moe_route_kernel<<<(rows + kRouteWarps - 1) / kRouteWarps, kRouteWarps * 32, 0, stream>>>(p);
  FF_CHECK_LAUNCH();
}

void moe_sort(const TensorView& topk_ids, int num_experts, const TensorView& sorted_ids,
              const TensorView& sorted_rows, int rows, cudaStream_t stream) {
  constexpr const char* fn = "moe_sort";
  check_rows_arg(fn, "rows", rows);
  FF_CHECK(num_experts >= 1 && num_experts <= kMaxExperts, E::kInvalidArgument, fn, ": ",
           num_experts, " experts; up to ", kMaxExperts, " are sorted");
  FF_CHECK(topk_ids.defined() && topk_ids.dim() == 2, E::kInvalidArgument, fn,
           ": topk_ids must be a matrix [rows, k], got ", describe(topk_ids));
  check_table(fn, "topk_ids", topk_ids, DType::kI32, rows, topk_ids.size(1));
  const std::int64_t count = std::int64_t(rows) * topk_ids.size(1);
  FF_CHECK(count <= INT32_MAX, E::kInvalidArgument, fn, ": ", count, " rows to sort");
  check_list(fn, "sorted_ids", sorted_ids, count);
  check_list(fn, "sorted_rows", sorted_rows, count);
  if (count == 0) return;
  moe_sort_kernel<<<1, kSortThreads, 0, stream>>>(
      topk_ids.data_as<const std::int32_t>(), static_cast<int>(count), num_experts,
      sorted_ids.data_as<std::int32_t>(), sorted_rows.data_as<std::int32_t>());
  FF_CHECK_LAUNCH();
}

void moe_grouped_gemm(const TensorView& in, int in_divisor, const TensorView& sorted_ids,
                      const TensorView& sorted_rows, int count,
                      std::span<const void* const> weights, std::int64_t n, std::int64_t k,
                      const TensorView& out, cudaStream_t stream) {
  constexpr const char* fn = "moe_grouped_gemm";
  check_rows_arg(fn, "count", count);
  FF_CHECK(in_divisor >= 1, E::kInvalidArgument, fn, ": in_divisor must be ≥ 1, got ", in_divisor);
  const std::int64_t in_rows = (std::int64_t(count) + in_divisor - 1) / in_divisor;
  FF_CHECK(check_matrix(fn, "in", in, in_rows, false) == k, E::kInvalidArgument, fn, ": in ",
           in.describe(), " is not ", k, " wide");
  FF_CHECK(check_matrix(fn, "out", out, count, true) == n, E::kInvalidArgument, fn, ": out ",
           out.describe(), " is not ", n, " wide");
  check_same(fn, in, "in", out, "out");
  FF_CHECK(k >= 8 && k % 8 == 0 && k <= INT32_MAX && n >= 2 && n % 2 == 0 && n <= INT32_MAX,
           E::kInvalidArgument, fn, ": needs k a multiple of 8 and n even, got n ", n, ", k ", k);
  FF_CHECK(aligned16(in.data()) && in.stride(0) % 8 == 0 && out.stride(0) % 2 == 0 &&
               reinterpret_cast<std::uintptr_t>(out.data()) % 4 == 0,
           E::kInvalidArgument, fn,
           ": reads rows of in in 16-byte pieces and writes out in pairs: misaligned ",
           in.describe(), " or ", out.describe());
  FF_CHECK(!weights.empty() && weights.size() <= kMaxExperts, E::kInvalidArgument, fn, ": ",
           weights.size(), " experts; 1 to ", kMaxExperts, " are multiplied");
  for (std::size_t e = 0; e < weights.size(); ++e) {
    FF_CHECK(weights[e] != nullptr && aligned16(weights[e]), E::kInvalidArgument, fn, ": expert ",
             e, "'s weights are null or not 16-byte aligned");
  }
  check_list(fn, "sorted_ids", sorted_ids, count);
  check_list(fn, "sorted_rows", sorted_rows, count);
  if (count == 0) return;
  GroupedGemmParams p{};
  p.in = in.data();
  p.in_stride = in.stride(0);
  p.in_divisor = in_divisor;
  p.sorted_ids = sorted_ids.data_as<const std::int32_t>();
  p.sorted_rows = sorted_rows.data_as<const std::int32_t>();
  p.count = count;
  p.num_experts = static_cast<int>(weights.size());
  for (std::size_t e = 0; e < weights.size(); ++e) p.weights[e] = weights[e];
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.out = out.data();
  p.out_stride = out.stride(0);
  // The most tiles a routing of `count` rows over the experts can need: every expert's last
  // tile partly filled.
  const int experts_used = std::min<int>(p.num_experts, count);
  const dim3 grid((count + kTileM - 1) / kTileM + experts_used,
                  static_cast<unsigned>((n + kTileN - 1) / kTileN));
  dispatch_model_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    moe_grouped_gemm_kernel<T><<<grid, kGemmThreads, 0, stream>>>(p);
  });
  FF_CHECK_LAUNCH();
}

void moe_combine(const TensorView& expert_out, const TensorView& topk_weights, int k,
                 const TensorView& hidden, bool accumulate, int rows, cudaStream_t stream) {
  constexpr const char* fn = "moe_combine";
  check_rows_arg(fn, "rows", rows);
  FF_CHECK(k >= 1 && k <= kMaxExpertsPerToken, E::kInvalidArgument, fn, ": k is ", k);
  const std::int64_t width = check_matrix(fn, "hidden", hidden, rows, true, true);
  FF_CHECK(check_matrix(fn, "expert_out", expert_out, std::int64_t(rows) * k, false) == width,
           E::kInvalidArgument, fn, ": expert_out ", expert_out.describe(), " is not ", width,
           " wide");
  check_table(fn, "topk_weights", topk_weights, DType::kF32, rows, k);
  if (hidden.dtype() != DType::kF32) check_same(fn, hidden, "hidden", expert_out, "expert_out");
  if (rows == 0) return;
  CombineParams p{};
  p.expert_out = expert_out.data();
  p.expert_stride = expert_out.stride(0);
  p.weights = topk_weights.data_as<const float>();
  p.k = k;
  p.hidden = hidden.data();
  p.hidden_stride = hidden.stride(0);
  p.width = static_cast<int>(width);
  p.accumulate = accumulate;
  const int threads = threads_for(width, 256);
  dispatch_model_dtype(expert_out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_f32_or(hidden.dtype(), tag, [&](auto hidden_tag) {
      using TH = typename decltype(hidden_tag)::type;
      moe_combine_kernel<TH, T><<<rows, threads, 0, stream>>>(p);
    });
  });
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::model_kernels
