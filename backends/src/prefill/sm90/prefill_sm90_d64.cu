// Hopper prefill kernels for head size 64 (compiled for sm_90a).
#include "prefill/sm90/prefill_sm90_dispatch.cuh"

namespace freezeframe::prefill {
template Sm90Kernel prefill_sm90_kernel_for_head_size<64>(DType, bool);
template int prefill_sm90_shared_bytes<64>(bool);
}  // namespace freezeframe::prefill
