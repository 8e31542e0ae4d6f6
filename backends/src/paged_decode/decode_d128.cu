// Paged decode kernels for head size 128.
#include "paged_decode/decode_dispatch.cuh"

namespace freezeframe::paged_decode {
template DecodeKernel decode_kernel_for_head_size<128>(DType, DType, int);
}  // namespace freezeframe::paged_decode
