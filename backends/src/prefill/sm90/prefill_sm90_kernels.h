#pragma once
// The Hopper prefill kernels of one head size, compiled for sm_90a in their own translation
// units (prefill_sm90_d<D>.cu); the launcher reaches them through these pointers.

#include "freezeframe/core/dtype.h"
#include "prefill/sm90/prefill_sm90_params.h"

namespace freezeframe::prefill {

using Sm90Kernel = void (*)(Sm90Params);

/// The kernel for 16-bit `dtype` queries, keys and values of head size D.
template <int D>
Sm90Kernel prefill_sm90_kernel_for_head_size(DType dtype);

/// Dynamic shared memory of the kernel of head size D.
template <int D>
int prefill_sm90_shared_bytes();

}  // namespace freezeframe::prefill
