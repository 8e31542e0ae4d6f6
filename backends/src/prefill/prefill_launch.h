#pragma once
// Host-side launchers of the prefill kernel.

#include <cuda_runtime_api.h>

#include "freezeframe/base/dtype.h"
#include "prefill/prefill_params.h"

namespace freezeframe::prefill {

using PrefillKernel = void (*)(PrefillParams);

/// The kernel for queries of `dtype` over keys/values of `kv_dtype`; throws kUnsupported for a
/// combination without a compiled kernel.
PrefillKernel prefill_kernel(DType dtype, DType kv_dtype, int head_size);
/// Its dynamic shared memory.
int shared_bytes(DType kv_dtype, int head_size);
/// Query rows of its CTA tile.
int tile_rows(int head_size);

/// Query heads of one KV head a CTA tile packs: the largest power of two dividing the group,
/// at most kMaxHeadsPerTile.
int heads_per_tile(int group_size);

/// CTAs of that kernel one SM holds at once (its occupancy on the current device).
int resident_ctas_per_sm(DType dtype, DType kv_dtype, int head_size);

/// CTAs of a launch over a step of `num_rows` rows: enough for every CTA tile such a step can
/// have, at most `resident_ctas` (what the GPU holds at once). Depends on the padded step size
/// only, so a captured launch fits any step of that size.
int grid_size(int num_rows, int num_heads, int heads_per_tile, int tile_rows, int resident_ctas);

void launch_prefill(const PrefillParams& p, DType dtype, DType kv_dtype, int head_size, int grid,
                    cudaStream_t stream);

/// One head size's instantiations (each in its own translation unit, so builds parallelise).
template <int D>
PrefillKernel prefill_kernel_for_head_size(DType dtype, DType kv_dtype);

}  // namespace freezeframe::prefill
