// Paged decode kernels for head size 128.
#include "paged_decode/decode_dispatch.cuh"

namespace freezeframe::paged_decode {
template void launch_decode_for_head_size<128>(const DecodeParams&, DType, DType, int, cudaStream_t);
}  // namespace freezeframe::paged_decode
