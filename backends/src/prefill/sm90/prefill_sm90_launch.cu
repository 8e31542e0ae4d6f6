// Tensor maps, occupancy and launch of the Hopper prefill kernel.

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/device_properties.h"
#include "kernels/dynamic_shared_memory.h"
#include "kernels/head_sizes.h"
#include "prefill/sm90/prefill_sm90_kernels.h"
#include "prefill/sm90/prefill_sm90_launch.h"

namespace freezeframe::prefill {
namespace {

using E = ErrorCode;

#if defined(FREEZEFRAME_SM90A_KERNELS)
constexpr bool kCompiled = true;
#else
constexpr bool kCompiled = false;
#endif

/// The kernel, allowed its dynamic shared memory.
Sm90Kernel kernel_for(DType dtype, int head_size, bool overlap, int* smem_bytes) {
  Sm90Kernel kernel = nullptr;
  int bytes = 0;
  if constexpr (kCompiled) {
    kernels::with_head_size(head_size, [&]<int D>() {
      kernel = prefill_sm90_kernel_for_head_size<D>(dtype, overlap);
      bytes = prefill_sm90_shared_bytes<D>(overlap);
    });
  }
  FF_CHECK(kernel != nullptr, E::kUnsupported, "prefill (sm_90a): no kernel for head size ",
           head_size);
  kernels::allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), bytes);
  *smem_bytes = bytes;
  return kernel;
}

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FF_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                   cudaEnableDefault, &found));
    FF_CHECK(found == cudaDriverEntryPointSuccess && f != nullptr, E::kUnsupported,
             "prefill (sm_90a): the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// A 4-d map over `t` — (dim, token in block, head, block) of a paged cache half, or
/// (dim, row, head, 1) of rows — read in boxes of 64 columns × `rows`, 128-byte swizzled.
CUtensorMap encode(const TensorView& t, bool paged, DType dtype, int head_size, int rows) {
  const std::int64_t elem = 2;
  cuuint64_t dims[4];
  cuuint64_t strides[3];  // bytes, of dims 1..3
  if (paged) {
    dims[0] = head_size;
    dims[1] = t.size(1);
    dims[2] = t.size(2);
    dims[3] = t.size(0);
    strides[0] = t.stride(1) * elem;
    strides[1] = t.stride(2) * elem;
    strides[2] = t.stride(0) * elem;
  } else {
    dims[0] = head_size;
    dims[1] = t.size(0);
    dims[2] = t.size(1);
    dims[3] = 1;
    strides[0] = t.stride(0) * elem;
    strides[1] = t.stride(1) * elem;
    strides[2] = t.size(0) * t.stride(0) * elem;
  }
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode_function()(
      &map,
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<void*>(t.data()), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FF_CHECK(r == CUDA_SUCCESS, E::kInvalidArgument,
           "prefill (sm_90a): the driver refused the tensor map of the keys/values (error ",
           static_cast<int>(r), ")");
  return map;
}

/// A 3-d map over the queries `q` ([rows, heads, head size]): (dim, head, row), read in boxes of
/// 64 columns × the CTA tile's 2^hp_shift heads × its 128 / 2^hp_shift tokens (the kernel's
/// row order: token-major, head-minor), 128-byte swizzled. Encoded on every launch (a step's
/// rows change from step to step; a few microseconds of the host's).
CUtensorMap encode_queries(const TensorView& q, DType dtype, int head_size, int hp_shift) {
  const std::int64_t elem = 2;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_size),
                              static_cast<cuuint64_t>(q.size(1)),
                              static_cast<cuuint64_t>(q.size(0))};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(q.stride(1) * elem),
                                 static_cast<cuuint64_t>(q.stride(0) * elem)};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(1 << hp_shift),
                             static_cast<cuuint32_t>(128 >> hp_shift)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode_function()(
      &map,
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
      const_cast<void*>(q.data()), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FF_CHECK(r == CUDA_SUCCESS, E::kInvalidArgument,
           "prefill (sm_90a): the driver refused the tensor map of the queries (error ",
           static_cast<int>(r), ")");
  return map;
}

/// encode(), kept by its arguments: a layer's cache is the same every step, so its maps are
/// encoded once rather than on every launch (which eager and piecewise steps make per layer).
CUtensorMap cached_map(const TensorView& t, bool paged, DType dtype, int head_size, int rows) {
  // Fixed-size keys: looking one up allocates nothing (a cache view has rank 4, rows rank 3).
  using Dims = std::array<std::int64_t, 4>;
  using Key = std::tuple<const void*, bool, DType, int, int, Dims, Dims>;
  FF_CHECK(t.dim() <= 4, E::kInternal, "prefill (sm_90a): keys/values of rank ", t.dim());
  Key key{t.data(), paged, dtype, head_size, rows, {}, {}};
  for (int d = 0; d < t.dim(); ++d) {
    std::get<5>(key)[d] = t.size(d);
    std::get<6>(key)[d] = t.stride(d);
  }
  static std::mutex mutex;
  static std::map<Key, CUtensorMap> maps;
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = maps.find(key); it != maps.end()) return it->second;
  const CUtensorMap map = encode(t, paged, dtype, head_size, rows);
  maps.emplace(std::move(key), map);
  return map;
}

int block_n(int head_size) {
  int n = 0;
  kernels::with_head_size(head_size, [&]<int D>() { n = Sm90Config<D>::kBlockN; });
  return n;
}

}  // namespace

bool sm90_available() {
  static const bool available = [] {
    if (!kCompiled) return false;
    try {
      return current_device_properties().compute_capability == 90;
    } catch (const Error&) {
      return false;
    }
  }();
  return available;
}

std::optional<std::string> sm90_cannot_run(DType dtype, int head_size, const TensorView& q,
                                           const TensorView& k, bool paged, const TensorView& out) {
  if (!sm90_available()) return "this build or this GPU has no sm_90a kernels";
  if (dtype != DType::kBF16 && dtype != DType::kF16) return "queries are not 16-bit";
  if (k.dtype() != dtype) return "keys and values are not of the query dtype";
  if (head_size != 64 && head_size != 128 && head_size != 256) return "head size not 64/128/256";
  if (reinterpret_cast<std::uintptr_t>(k.data()) % 16 != 0) {
    return "keys or values not 16-byte aligned";
  }
  const int token_dim = paged ? 1 : 0;
  for (int d = 0; d < k.dim() - 1; ++d) {
    if (k.stride(d) % 8 != 0) return "key strides not multiples of 16 bytes";
  }
  if (k.stride(k.dim() - 1) != 1) return "key rows not contiguous";
  if (paged && k.size(token_dim) < 8) return "blocks of fewer than 8 tokens";
  // Q comes by TMA or 16-byte loads, O goes out 16 bytes a thread.
  auto rows_aligned = [](const TensorView& t) {
    return reinterpret_cast<std::uintptr_t>(t.data()) % 16 == 0 && t.stride(0) % 8 == 0 &&
           t.stride(1) % 8 == 0 && t.stride(2) == 1;
  };
  if (!rows_aligned(q)) return "query rows not 16-byte aligned";
  if (!rows_aligned(out)) return "output rows not 16-byte aligned";
  return std::nullopt;
}

int sm90_resident_ctas_per_sm(DType dtype, int head_size) {
  // The fewer of the two instantiations' (their shared memory differs): the grid of either.
  int fewest = std::numeric_limits<int>::max();
  for (const bool overlap : {false, true}) {
    int bytes = 0;
    const Sm90Kernel kernel = kernel_for(dtype, head_size, overlap, &bytes);
    int ctas = 0;
    FF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, 384, bytes));
    fewest = std::min(fewest, ctas);
  }
  return std::max(fewest, 1);
}

int sm90_tile_rows() { return 128; }

void launch_prefill_sm90(const PrefillParams& p, const TensorView& q, const TensorView& k,
                         const TensorView& v, bool paged, DType dtype, int head_size, int grid,
                         cudaStream_t stream) {
  Sm90Params params;
  params.p = p;
  const int n = block_n(head_size);
  params.rows_per_copy = paged ? static_cast<int>(std::min<std::int64_t>(k.size(1), n)) : n;
  // Pages of fewer than 64 tokens make a tile many small copies, and the producer, not the
  // tensor cores, sets the pace: there the overlap only holds a stage longer (measured slower,
  // PERFORMANCE.md).
  const bool overlap = params.rows_per_copy >= 64;
  int bytes = 0;
  const Sm90Kernel kernel = kernel_for(dtype, head_size, overlap, &bytes);
  params.k_map = cached_map(k, paged, dtype, head_size, params.rows_per_copy);
  params.v_map = cached_map(v, paged, dtype, head_size, params.rows_per_copy);
  bool async_io = false;  // the producer brings Q by TMA (Sm90Config::kAsyncIo)
  kernels::with_head_size(head_size, [&]<int D>() { async_io = Sm90Config<D>::kAsyncIo; });
  if (async_io) params.q_map = encode_queries(q, dtype, head_size, p.heads_per_tile_shift);
  kernel<<<grid, 384, bytes, stream>>>(params);
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::prefill
