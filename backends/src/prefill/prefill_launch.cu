// Head-size dispatch, occupancy and launch of the prefill kernel.

#include <algorithm>

#include "freezeframe/core/cuda_check.h"
#include "kernels/dynamic_shared_memory.h"
#include "kernels/head_sizes.h"
#include "prefill/prefill_kernel.cuh"
#include "prefill/prefill_launch.h"
#include "prefill/prefill_plan.h"

namespace freezeframe::prefill {
namespace {

/// The kernel, allowed the dynamic shared memory it needs (above the 48 KiB default).
PrefillKernel configured_kernel(DType dtype, DType kv_dtype, int head_size) {
  const PrefillKernel kernel = prefill_kernel(dtype, kv_dtype, head_size);
  kernels::allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel),
                                       shared_bytes(kv_dtype, head_size));
  return kernel;
}

}  // namespace

PrefillKernel prefill_kernel(DType dtype, DType kv_dtype, int head_size) {
  PrefillKernel kernel = nullptr;
  const bool compiled = kernels::with_head_size(
      head_size, [&]<int D>() { kernel = prefill_kernel_for_head_size<D>(dtype, kv_dtype); });
  FF_CHECK(compiled, ErrorCode::kUnsupported, "prefill: no kernel for head size ", head_size);
  return kernel;
}

int shared_bytes(DType kv_dtype, int head_size) {
  int bytes = 0;
  const bool compiled = kernels::with_head_size(head_size, [&]<int D>() {
    bytes = is_fp8(kv_dtype) ? KernelConfig<__half, __nv_fp8_e4m3, D>::kSmemBytes
                             : KernelConfig<__half, __half, D>::kSmemBytes;
  });
  FF_CHECK(compiled, ErrorCode::kUnsupported, "prefill: no kernel for head size ", head_size);
  return bytes;
}

int tile_rows(int head_size) {
  int rows = 0;
  const bool compiled = kernels::with_head_size(
      head_size, [&]<int D>() { rows = KernelConfig<__half, __half, D>::kBlockM; });
  FF_CHECK(compiled, ErrorCode::kUnsupported, "prefill: no kernel for head size ", head_size);
  return rows;
}

int heads_per_tile(int group_size) {
  int h = 1;
  while (h < kMaxHeadsPerTile && group_size % (2 * h) == 0) h *= 2;
  return h;
}

int resident_ctas_per_sm(DType dtype, DType kv_dtype, int head_size) {
  int ctas = 0;
  FF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &ctas, configured_kernel(dtype, kv_dtype, head_size), kThreads,
      shared_bytes(kv_dtype, head_size)));
  return std::max(ctas, 1);
}

int grid_size(int num_rows, int num_heads, int heads_per_tile, int tile_rows, int resident_ctas) {
  const int subtiles = kPlanTileTokens / (tile_rows / heads_per_tile);
  const std::int64_t most =
      std::int64_t(max_plan_tiles(num_rows, num_rows)) * subtiles * (num_heads / heads_per_tile);
  return static_cast<int>(std::clamp<std::int64_t>(most, 1, std::max(resident_ctas, 1)));
}

void launch_prefill(const PrefillParams& p, DType dtype, DType kv_dtype, int head_size, int grid,
                    cudaStream_t stream) {
  const PrefillKernel kernel = configured_kernel(dtype, kv_dtype, head_size);
  kernel<<<grid, kThreads, shared_bytes(kv_dtype, head_size), stream>>>(p);
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::prefill
