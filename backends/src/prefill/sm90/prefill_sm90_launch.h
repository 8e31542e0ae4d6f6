#pragma once
// Host side of the Hopper prefill kernel: whether it can run a call, its occupancy, and the
// launch (which encodes the K and V tensor maps of the call's cache or rows).

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "freezeframe/base/dtype.h"
#include "freezeframe/core/tensor.h"
#include "prefill/prefill_params.h"

namespace freezeframe::prefill {

/// Whether this build holds the Hopper kernels (sm_90a) and the current device runs them.
[[nodiscard]] bool sm90_available();

/// Why the Hopper kernel cannot attend queries of `dtype` over `k` (a paged cache's half or
/// rows) from `q` into `out` (both [rows, heads, head size]), or nothing when it can: 16-bit
/// caches of the query dtype, head sizes 64/128/256, blocks of at least 8 tokens, 16-byte
/// aligned rows of queries, keys and outputs.
[[nodiscard]] std::optional<std::string> sm90_cannot_run(DType dtype, int head_size,
                                                         const TensorView& q, const TensorView& k,
                                                         bool paged, const TensorView& out);

/// CTAs of the kernel one SM holds at once.
[[nodiscard]] int sm90_resident_ctas_per_sm(DType dtype, int head_size);
/// Query rows of its CTA tile.
[[nodiscard]] int sm90_tile_rows();

/// `q`: the queries p.q points at, [rows, heads, head size] (their tensor map).
void launch_prefill_sm90(const PrefillParams& p, const TensorView& q, const TensorView& k,
                         const TensorView& v, bool paged, DType dtype, int head_size, int grid,
                         cudaStream_t stream);

}  // namespace freezeframe::prefill
