#pragma once
// The device half of a compact block-table upload (MetadataBuilder::build).

#include <cuda_runtime_api.h>

#include <cstdint>

namespace freezeframe {

/// table[r · stride + c] = compact[r · width + c] for r < rows, c < width (width ≤ stride).
void expand_block_table(const std::int32_t* compact, std::int32_t* table, int rows, int width,
                        int stride, cudaStream_t stream);

}  // namespace freezeframe
