#pragma once
// Host-side launchers of the paged decode kernels.

#include <cuda_runtime_api.h>

#include "freezeframe/base/dtype.h"
#include "paged_decode/decode_params.h"

namespace freezeframe::paged_decode {

using DecodeKernel = void (*)(DecodeParams);

/// The decode kernel for queries of `dtype` over a `kv_dtype` cache; throws kUnsupported for a
/// combination without a compiled kernel.
DecodeKernel decode_kernel(DType dtype, DType kv_dtype, int head_size, int heads_per_cta);

/// Grid (p.num_splits, p.num_kv_heads × group_size / heads_per_cta, p.num_rows).
void launch_decode(const DecodeParams& p, DType dtype, DType kv_dtype, int head_size,
                   int heads_per_cta, cudaStream_t stream);

/// CTAs of that kernel one SM holds at once (its occupancy on the current device).
int resident_ctas_per_sm(DType dtype, DType kv_dtype, int head_size, int heads_per_cta);
/// Merges the p.num_splits partial states of every decode row into p.out (and p.lse).
void launch_combine(const DecodeParams& p, DType dtype, int head_size, cudaStream_t stream);

/// One head size's instantiations (each in its own translation unit, so builds parallelise).
template <int D>
DecodeKernel decode_kernel_for_head_size(DType dtype, DType kv_dtype, int heads_per_cta);

}  // namespace freezeframe::paged_decode
