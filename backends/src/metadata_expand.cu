#include "metadata_expand.h"

#include "freezeframe/core/error.h"

namespace freezeframe {
namespace {

/// One block per row; the row's width comes from the step's uploaded metadata.
__global__ void expand_block_table_kernel(const std::int32_t* __restrict__ width_ptr,
                                          const std::int32_t* __restrict__ compact,
                                          std::int32_t* __restrict__ table, int stride) {
  const int width = *width_ptr;
  const std::int64_t row = blockIdx.x;
  for (int c = threadIdx.x; c < width; c += blockDim.x) {
    table[row * stride + c] = compact[row * width + c];
  }
}

}  // namespace

void expand_block_table(const std::int32_t* width, const std::int32_t* compact,
                        std::int32_t* table, int rows, int stride, cudaStream_t stream) {
  if (rows == 0) return;
  expand_block_table_kernel<<<rows, 128, 0, stream>>>(width, compact, table, stride);
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe
