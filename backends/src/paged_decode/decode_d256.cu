// Paged decode kernels for head size 256.
#include "paged_decode/decode_dispatch.cuh"

namespace freezeframe::paged_decode {
template DecodeKernel decode_kernel_for_head_size<256>(DType, DType, int);
}  // namespace freezeframe::paged_decode
