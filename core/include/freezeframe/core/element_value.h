#pragma once
// One element of a dtype read and written on the host, with CUDA's own conversions (so the
// host reference, tests and tools round exactly as kernels do).

#include "freezeframe/base/dtype.h"

namespace freezeframe {

/// Reads one element at `p` as float (host code). Integer types convert by value.
[[nodiscard]] float load_as_float(const void* p, DType dtype);
/// Writes `value` rounded (to nearest even; fp8 saturates to the largest finite) into `p`.
void store_from_float(void* p, DType dtype, float value);
/// Rounds a float through `dtype` and back: the value a tensor of that dtype would hold.
[[nodiscard]] float round_through(DType dtype, float value);

}  // namespace freezeframe
