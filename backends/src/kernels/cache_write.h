#pragma once
// The cache write every backend of the paged layout shares.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "freezeframe/core/tensor.h"

namespace freezeframe::kernels {

/// Writes key/value rows [T_kv, H_kv, D] into the paged cache halves k_cache / v_cache
/// ([num_blocks, block_size, H_kv, D] with any strides) at slot_mapping (device, −1 skips).
/// fp8 caches store x / scale.
void launch_reshape_and_cache(const TensorView& key, const TensorView& value,
                              const TensorView& k_cache, const TensorView& v_cache,
                              const std::int64_t* slot_mapping, int num_slots, float k_scale,
                              float v_scale, cudaStream_t stream);

}  // namespace freezeframe::kernels
