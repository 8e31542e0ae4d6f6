// Prefill kernels for head size 128.
#include "prefill/prefill_dispatch.cuh"

namespace freezeframe::prefill {
template PrefillKernel prefill_kernel_for_head_size<128>(DType, DType);
}  // namespace freezeframe::prefill
