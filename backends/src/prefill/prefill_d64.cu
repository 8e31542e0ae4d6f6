// Prefill kernels for head size 64.
#include "prefill/prefill_dispatch.cuh"

namespace freezeframe::prefill {
template PrefillKernel prefill_kernel_for_head_size<64>(DType, DType);
}  // namespace freezeframe::prefill
