// Prefill kernels for head size 256.
#include "prefill/prefill_dispatch.cuh"

namespace freezeframe::prefill {
template PrefillKernel prefill_kernel_for_head_size<256>(DType, DType);
}  // namespace freezeframe::prefill
