// The built-in model's element-wise kernels (RMS norm in norm_kernels.cu). Design shared by
// all of them:
//  - one CTA per row (embedding and silu_and_mul add a grid dimension over chunks of the row so
//    a single decode row still spreads over several SMs); the grid is a function of `rows` and
//    the widths only;
//  - 16-byte loads and stores (8 bf16/f16, 4 f32) when every pointer, row stride and width
//    allows it, checked on the host; otherwise the same kernel body one element at a time;
//  - f32 arithmetic, one rounding to the storage type per output element.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/cuda_check.h"
#include "runtime/kernel_support.cuh"
#include "runtime/model_kernels.h"

namespace freezeframe::model_kernels {
namespace {

using namespace detail;

// ---------------------------------------------------------------------------------------------
// embedding

struct EmbeddingParams {
  const void* table;
  std::int64_t table_stride;
  std::int64_t vocab;     // rows of table
  std::int64_t first_id;  // the id of table's first row
  const std::int32_t* token_ids;
  void* out;
  std::int64_t out_stride;
  int width;
};

// grid (rows, chunks): CTA y copies every gridDim.y-th block of packs of row x, into rows of
// the table's dtype T or, for an f32 residual stream, TOut = float.
template <typename T, typename TOut, int kVec>
__global__ void embedding_kernel(const __grid_constant__ EmbeddingParams p) {
  const int row = blockIdx.x;
  const std::int64_t id = p.token_ids[row] - p.first_id;
  const bool valid = id >= 0 && id < p.vocab;
  const T* src = static_cast<const T*>(p.table) + (valid ? id : 0) * p.table_stride;
  TOut* dst = static_cast<TOut*>(p.out) + row * p.out_stride;
  const int units = p.width / kVec;
  for (int u = blockIdx.y * blockDim.x + threadIdx.x; u < units; u += gridDim.y * blockDim.x) {
    float v[kVec];
    if (valid) {
      load_floats<T, kVec>(src + u * kVec, v);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = 0.0f;
    }
    store_floats<TOut, kVec>(dst + u * kVec, v);
  }
}

// ---------------------------------------------------------------------------------------------
// rope_neox

// Pair frequencies travel in the parameters (1 KiB at most), computed once on the host.
constexpr int kMaxRotaryPairs = 256;

struct RopeParams {
  void* qkv;
  std::int64_t row_stride;
  const std::int64_t* positions;
  int rotating_heads;  // num_heads + num_kv_heads
  int head_size;
  int half;  // rotary_dim / 2
  float inv_freq[kMaxRotaryPairs];
};

// One CTA per row. The row's cos/sin per pair go to shared memory first (one sincosf per pair,
// reused by every head); then each thread rotates kVec consecutive pairs of one head.
template <typename T, int kVec>
__global__ void rope_neox_kernel(const __grid_constant__ RopeParams p) {
  __shared__ float s_cos[kMaxRotaryPairs];
  __shared__ float s_sin[kMaxRotaryPairs];
  const int row = blockIdx.x;
  // Angle in f32 as position · inv_freq, the convention of the reference models: one f32
  // rounding of an angle near 1e5 rad moves it by up to 2^-8 rad, so any other evaluation
  // order would give visibly different values at long context.
  const float position = static_cast<float>(p.positions[row]);
  for (int i = threadIdx.x; i < p.half; i += blockDim.x) {
    float s, c;
    sincosf(position * p.inv_freq[i], &s, &c);
    s_cos[i] = c;
    s_sin[i] = s;
  }
  __syncthreads();

  T* base = static_cast<T*>(p.qkv) + row * p.row_stride;
  const int packs_per_head = p.half / kVec;
  const int units = p.rotating_heads * packs_per_head;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    const int head = u / packs_per_head;
    const int i0 = (u - head * packs_per_head) * kVec;
    T* x_ptr = base + static_cast<std::int64_t>(head) * p.head_size + i0;
    T* y_ptr = x_ptr + p.half;
    const Pack<T, kVec> x = load<T, kVec>(x_ptr);
    const Pack<T, kVec> y = load<T, kVec>(y_ptr);
    Pack<T, kVec> x_out, y_out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float c = s_cos[i0 + j], s = s_sin[i0 + j];
      const float xf = to_float(x.v[j]), yf = to_float(y.v[j]);
      x_out.v[j] = from_float<T>(xf * c - yf * s);
      y_out.v[j] = from_float<T>(yf * c + xf * s);
    }
    store<T, kVec>(x_ptr, x_out);
    store<T, kVec>(y_ptr, y_out);
  }
}

// ---------------------------------------------------------------------------------------------
// silu_and_mul

struct SiluParams {
  const void* gate_up;
  std::int64_t in_stride;
  void* out;
  std::int64_t out_stride;
  int inter;  // I
};

// grid (rows, chunks), like the embedding.
template <typename T, int kVec>
__global__ void silu_and_mul_kernel(const __grid_constant__ SiluParams p) {
  const int row = blockIdx.x;
  const T* gate = static_cast<const T*>(p.gate_up) + row * p.in_stride;
  const T* up = gate + p.inter;
  T* out = static_cast<T*>(p.out) + row * p.out_stride;
  const int units = p.inter / kVec;
  for (int u = blockIdx.y * blockDim.x + threadIdx.x; u < units; u += gridDim.y * blockDim.x) {
    const Pack<T, kVec> g = load<T, kVec>(gate + u * kVec);
    const Pack<T, kVec> v = load<T, kVec>(up + u * kVec);
    Pack<T, kVec> y;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      y.v[j] = from_float<T>(silu_times(to_float(g.v[j]), to_float(v.v[j])));
    }
    store<T, kVec>(out + u * kVec, y);
  }
}

// ---------------------------------------------------------------------------------------------
// add_bias

struct BiasParams {
  void* y;
  std::int64_t y_stride;
  const void* bias;
  int width;
};

// grid (rows, chunks), like the embedding.
template <typename T, int kVec>
__global__ void add_bias_kernel(const __grid_constant__ BiasParams p) {
  T* y = static_cast<T*>(p.y) + blockIdx.x * p.y_stride;
  const T* bias = static_cast<const T*>(p.bias);
  const int units = p.width / kVec;
  for (int u = blockIdx.y * blockDim.x + threadIdx.x; u < units; u += gridDim.y * blockDim.x) {
    Pack<T, kVec> v = load<T, kVec>(y + u * kVec);
    const Pack<T, kVec> b = load<T, kVec>(bias + u * kVec);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v.v[j] = from_float<T>(to_float(v.v[j]) + to_float(b.v[j]));
    store<T, kVec>(y + u * kVec, v);
  }
}

// Row chunks: about 4 packs per thread per CTA, so one long row spreads over several SMs.
dim3 row_chunk_grid(int rows, std::int64_t units, int threads) {
  const std::int64_t per_cta = static_cast<std::int64_t>(threads) * 4;
  const std::int64_t chunks = std::min<std::int64_t>((units + per_cta - 1) / per_cta, kMaxGridY);
  return dim3(static_cast<unsigned>(rows),
              static_cast<unsigned>(std::max<std::int64_t>(chunks, 1)));
}

// ---------------------------------------------------------------------------------------------
// fill_uniform

struct FillParams {
  void* data;
  std::int64_t numel;
  std::uint64_t key;  // splitmix64_mix(seed)
  float lo, span;     // value = fma(span, u, lo)
  // Element i of the block is element first + (i div cols) · whole_cols + i mod cols of the
  // whole tensor (cols = whole_cols, first = 0: the whole tensor).
  std::int64_t cols, whole_cols, first;
};

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// The SplitMix64 finaliser (Steele, Lea and Flood 2014).
__host__ __device__ __forceinline__ std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i is the i-th output of a SplitMix64 stream seeded with the mixed seed; its top 24
// bits make u, exact in f32, in [0, 1). Integer hashing and one explicit fma: bit-identical
// on every device.
template <typename T>
__device__ __forceinline__ T uniform_value(const FillParams& p, std::int64_t i) {
  if (p.cols != p.whole_cols) i = (i / p.cols) * p.whole_cols + i % p.cols;
  i += p.first;
  const std::uint64_t h = splitmix64_mix(p.key + static_cast<std::uint64_t>(i) * kGolden);
  const float u = static_cast<float>(h >> 40) * 0x1.0p-24f;
  return from_float<T>(__fmaf_rn(p.span, u, p.lo));
}

// Grid-stride over packs, then the last numel % kVec elements one by one.
template <typename T, int kVec>
__global__ void fill_uniform_kernel(const __grid_constant__ FillParams p) {
  T* data = static_cast<T*>(p.data);
  const std::int64_t packs = p.numel / kVec;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::int64_t v = first; v < packs; v += stride) {
    Pack<T, kVec> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.v[j] = uniform_value<T>(p, v * kVec + j);
    store<T, kVec>(data + v * kVec, out);
  }
  for (std::int64_t i = packs * kVec + first; i < p.numel; i += stride) {
    data[i] = uniform_value<T>(p, i);
  }
}

template <typename T>
void launch_fill(const FillParams& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  constexpr int kThreads = 256;
  const bool vector = aligned16(p.data);
  const std::int64_t units = vector ? p.numel / kVec + p.numel % kVec : p.numel;
  // Enough CTAs to fill the GPU many times over; larger tensors loop.
  const std::int64_t blocks = std::clamp<std::int64_t>((units + kThreads - 1) / kThreads, 1, 4096);
  if (vector) {
    fill_uniform_kernel<T, kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  } else {
    fill_uniform_kernel<T, 1><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  }
  FF_CHECK_LAUNCH();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points

void embedding(const TensorView& table, const std::int32_t* token_ids, int rows,
               const TensorView& out, cudaStream_t stream, std::int64_t first_id) {
  constexpr const char* fn = "embedding";
  check_rows_arg(fn, "rows", rows);
  const std::int64_t width = check_matrix(fn, "table", table, 0, false);
  check_matrix(fn, "out", out, rows, true, true);
  FF_CHECK(out.size(1) == width, ErrorCode::kInvalidArgument, fn, ": out ", out.describe(),
           " and table ", table.describe(), " differ in width");
  if (out.dtype() != DType::kF32) check_same(fn, table, "table", out, "out");
  FF_CHECK(table.device() == out.device(), ErrorCode::kInvalidArgument, fn,
           ": table and out are on different devices");
  FF_CHECK(rows == 0 || token_ids != nullptr, ErrorCode::kInvalidArgument, fn,
           ": token_ids is null");
  if (rows == 0) return;

  EmbeddingParams p{};
  p.table = table.data();
  p.table_stride = table.stride(0);
  p.vocab = table.size(0);
  p.first_id = first_id;
  p.token_ids = token_ids;
  p.out = out.data();
  p.out_stride = out.stride(0);
  p.width = static_cast<int>(width);
  dispatch_model_dtype(table.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = kVec16<T>;
    const bool vector =
        rows_vectorizable(table, width, kVec) && rows_vectorizable(out, width, kVec);
    const std::int64_t units = vector ? width / kVec : width;
    const int threads = threads_for(units, 256);
    const dim3 grid = row_chunk_grid(rows, units, threads);
    dispatch_f32_or(out.dtype(), tag, [&](auto out_tag) {
      using TOut = typename decltype(out_tag)::type;
      if (vector) {
        embedding_kernel<T, TOut, kVec><<<grid, threads, 0, stream>>>(p);
      } else {
        embedding_kernel<T, TOut, 1><<<grid, threads, 0, stream>>>(p);
      }
    });
    FF_CHECK_LAUNCH();
  });
}

void rope_neox(const TensorView& qkv, const std::int64_t* positions, int rows, int num_heads,
               int num_kv_heads, int head_size, int rotary_dim, std::span<const float> inv_freq,
               cudaStream_t stream) {
  using E = ErrorCode;
  constexpr const char* fn = "rope_neox";
  check_rows_arg(fn, "rows", rows);
  FF_CHECK(num_heads >= 0 && num_kv_heads >= 0 && num_heads + num_kv_heads >= 1,
           E::kInvalidArgument, fn, ": needs at least one head, got num_heads ", num_heads,
           ", num_kv_heads ", num_kv_heads);
  FF_CHECK(head_size >= 2, E::kInvalidArgument, fn, ": head_size must be ≥ 2, got ", head_size);
  FF_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= head_size, E::kInvalidArgument,
           fn, ": rotary_dim must be even and in [2, head_size = ", head_size, "], got ",
           rotary_dim);
  FF_CHECK(rotary_dim / 2 <= kMaxRotaryPairs, E::kInvalidArgument, fn, ": rotary_dim ", rotary_dim,
           " exceeds the supported ", 2 * kMaxRotaryPairs);
  FF_CHECK(static_cast<int>(inv_freq.size()) == rotary_dim / 2, E::kInvalidArgument, fn, ": ",
           inv_freq.size(), " inverse frequencies for rotary_dim ", rotary_dim, " (one per pair)");
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    FF_CHECK(std::isfinite(inv_freq[i]) && inv_freq[i] > 0.0f, E::kInvalidArgument, fn,
             ": inv_freq[", i, "] must be finite and > 0, got ", inv_freq[i]);
  }
  const std::int64_t width = check_matrix(fn, "qkv", qkv, rows, true);
  const std::int64_t want_width =
      (static_cast<std::int64_t>(num_heads) + 2 * static_cast<std::int64_t>(num_kv_heads)) *
      head_size;
  FF_CHECK(width == want_width, E::kInvalidArgument, fn, ": qkv ", qkv.describe(),
           " is not [rows, (", num_heads, " + 2·", num_kv_heads, ")·", head_size, " = ", want_width,
           "]");
  FF_CHECK(rows == 0 || positions != nullptr, E::kInvalidArgument, fn, ": positions is null");
  if (rows == 0) return;

  RopeParams p{};
  p.qkv = qkv.data();
  p.row_stride = qkv.stride(0);
  p.positions = positions;
  p.rotating_heads = num_heads + num_kv_heads;
  p.head_size = head_size;
  p.half = rotary_dim / 2;
  // Computed on the host (rope_inv_frequencies: in double, rounded once), identical on every
  // device; a device powf may be a few ulp off, which at position 1e5 is a visible angle.
  std::copy(inv_freq.begin(), inv_freq.end(), p.inv_freq);
  dispatch_model_dtype(qkv.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = kVec16<T>;
    const bool vector =
        p.half % kVec == 0 && head_size % kVec == 0 && rows_vectorizable(qkv, width, kVec);
    const std::int64_t units =
        static_cast<std::int64_t>(p.rotating_heads) * p.half / (vector ? kVec : 1);
    const int threads = threads_for(units, 256);
    if (vector) {
      rope_neox_kernel<T, kVec><<<rows, threads, 0, stream>>>(p);
    } else {
      rope_neox_kernel<T, 1><<<rows, threads, 0, stream>>>(p);
    }
    FF_CHECK_LAUNCH();
  });
}

void silu_and_mul(const TensorView& gate_up, const TensorView& out, int rows, cudaStream_t stream) {
  using E = ErrorCode;
  constexpr const char* fn = "silu_and_mul";
  check_rows_arg(fn, "rows", rows);
  const std::int64_t width = check_matrix(fn, "gate_up", gate_up, rows, false);
  const std::int64_t inter = check_matrix(fn, "out", out, rows, true);
  FF_CHECK(width == 2 * inter, E::kInvalidArgument, fn, ": gate_up ", gate_up.describe(),
           " must be twice as wide as out ", out.describe());
  check_same(fn, gate_up, "gate_up", out, "out");
  if (rows == 0) return;

  SiluParams p{};
  p.gate_up = gate_up.data();
  p.in_stride = gate_up.stride(0);
  p.out = out.data();
  p.out_stride = out.stride(0);
  p.inter = static_cast<int>(inter);
  dispatch_model_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = kVec16<T>;
    // inter % kVec keeps the up half's packs aligned as well.
    const bool vector = rows_vectorizable(gate_up, width, kVec) && inter % kVec == 0 &&
                        rows_vectorizable(out, inter, kVec);
    const std::int64_t units = vector ? inter / kVec : inter;
    const int threads = threads_for(units, 256);
    const dim3 grid = row_chunk_grid(rows, units, threads);
    if (vector) {
      silu_and_mul_kernel<T, kVec><<<grid, threads, 0, stream>>>(p);
    } else {
      silu_and_mul_kernel<T, 1><<<grid, threads, 0, stream>>>(p);
    }
    FF_CHECK_LAUNCH();
  });
}

void add_bias(const TensorView& y, const TensorView& bias, int rows, cudaStream_t stream) {
  using E = ErrorCode;
  constexpr const char* fn = "add_bias";
  check_rows_arg(fn, "rows", rows);
  const std::int64_t width = check_matrix(fn, "y", y, rows, true);
  FF_CHECK(bias.defined() && bias.is_cuda() && bias.dim() == 1 && bias.size(0) == width &&
               bias.is_contiguous(),
           E::kInvalidArgument, fn, ": bias must be a contiguous device vector of ", width,
           " elements, got ", describe(bias));
  check_same(fn, y, "y", bias, "bias");
  if (rows == 0) return;

  BiasParams p{};
  p.y = y.data();
  p.y_stride = y.stride(0);
  p.bias = bias.data();
  p.width = static_cast<int>(width);
  dispatch_model_dtype(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = kVec16<T>;
    const bool vector = rows_vectorizable(y, width, kVec) && aligned16(bias.data());
    const std::int64_t units = vector ? width / kVec : width;
    const int threads = threads_for(units, 256);
    const dim3 grid = row_chunk_grid(rows, units, threads);
    if (vector) {
      add_bias_kernel<T, kVec><<<grid, threads, 0, stream>>>(p);
    } else {
      add_bias_kernel<T, 1><<<grid, threads, 0, stream>>>(p);
    }
    FF_CHECK_LAUNCH();
  });
}

void fill_uniform(const TensorView& t, std::uint64_t seed, float lo, float hi,
                  cudaStream_t stream) {
  const std::int64_t cols = t.defined() && t.dim() > 0 ? t.size(t.dim() - 1) : 1;
  fill_uniform_block(t, seed, lo, hi, cols, 0, 0, stream);
}

void fill_uniform_block(const TensorView& t, std::uint64_t seed, float lo, float hi,
                        std::int64_t whole_cols, std::int64_t first_row, std::int64_t first_col,
                        cudaStream_t stream) {
  using E = ErrorCode;
  constexpr const char* fn = "fill_uniform";
  FF_CHECK(t.defined() && t.is_cuda(), E::kInvalidArgument, fn, ": needs a device tensor, got ",
           describe(t));
  FF_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF16 || t.dtype() == DType::kF32 ||
               t.dtype() == DType::kFp8E4M3,
           E::kInvalidArgument, fn, ": t must be bf16, f16, f32 or fp8_e4m3, got ", t.describe());
  FF_CHECK(t.is_contiguous(), E::kInvalidArgument, fn, ": t ", t.describe(), " must be contiguous");
  FF_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && std::isfinite(hi - lo),
           E::kInvalidArgument, fn, ": needs finite lo ≤ hi, got [", lo, ", ", hi, ")");
  const std::int64_t numel = t.numel();
  if (numel == 0) return;
  // A vector is one row; a matrix's columns are its last dimension.
  const std::int64_t cols = t.dim() > 0 ? t.size(t.dim() - 1) : 1;
  FF_CHECK(first_row >= 0 && first_col >= 0 && first_col + cols <= whole_cols, E::kInvalidArgument,
           fn, ": the block of ", t.describe(), " at (", first_row, ", ", first_col,
           ") does not fit a tensor ", whole_cols, " columns wide");

  FillParams p{};
  p.data = t.data();
  p.numel = numel;
  p.key = splitmix64_mix(seed);
  p.lo = lo;
  p.span = hi - lo;
  p.cols = cols;
  p.whole_cols = whole_cols;
  p.first = first_row * whole_cols + first_col;
  switch (t.dtype()) {
    case DType::kF32: return launch_fill<float>(p, stream);
    case DType::kBF16: return launch_fill<__nv_bfloat16>(p, stream);
    case DType::kFp8E4M3: return launch_fill<__nv_fp8_e4m3>(p, stream);
    default: return launch_fill<__half>(p, stream);
  }
}

}  // namespace freezeframe::model_kernels
