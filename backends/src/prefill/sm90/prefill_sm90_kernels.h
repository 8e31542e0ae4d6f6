#pragma once
// The Hopper prefill kernels of one head size, compiled for sm_90a in their own translation
// units (prefill_sm90_d<D>.cu); the launcher reaches them through these pointers.

#include "freezeframe/base/dtype.h"
#include "prefill/sm90/prefill_sm90_params.h"

namespace freezeframe::prefill {

using Sm90Kernel = void (*)(Sm90Params);

/// The kernel for 16-bit `dtype` queries, keys and values of head size D; with `overlap`, the
/// one that overlaps a tile's softmax with the previous tile's P·V where that pays at D.
template <int D>
Sm90Kernel prefill_sm90_kernel_for_head_size(DType dtype, bool overlap);

/// Dynamic shared memory of that kernel.
template <int D>
int prefill_sm90_shared_bytes(bool overlap);

}  // namespace freezeframe::prefill
