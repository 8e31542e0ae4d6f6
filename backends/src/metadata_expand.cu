#include "metadata_expand.h"

#include <algorithm>

#include "freezeframe/core/error.h"

namespace freezeframe {
namespace {

__global__ void expand_block_table_kernel(const std::int32_t* compact, std::int32_t* table,
                                          int width, int stride) {
  const int row = blockIdx.y;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < width; c += gridDim.x * blockDim.x) {
    table[static_cast<std::int64_t>(row) * stride + c] = compact[static_cast<std::int64_t>(row) * width + c];
  }
}

}  // namespace

void expand_block_table(const std::int32_t* compact, std::int32_t* table, int rows, int width,
                        int stride, cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(std::min((width + kThreads - 1) / kThreads, 32), rows);
  expand_block_table_kernel<<<grid, kThreads, 0, stream>>>(compact, table, width, stride);
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe
