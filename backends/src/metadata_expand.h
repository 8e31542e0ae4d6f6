#pragma once
// The device half of a compact block-table upload (MetadataBuilder::finish).

#include <cuda_runtime_api.h>

#include <cstdint>

namespace freezeframe {

/// table[r · stride + c] = compact[r · width + c] for r < rows, c < width, with width read
/// from device memory (*width ≤ stride), so that the launch depends on rows and stride only.
void expand_block_table(const std::int32_t* width, const std::int32_t* compact,
                        std::int32_t* table, int rows, int stride, cudaStream_t stream);

}  // namespace freezeframe
