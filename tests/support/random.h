#pragma once
// Random test data: inputs are never zeros, and every value is exactly representable in the
// tensor's dtype, so GPU and host reference see the same numbers.

#include <cstdint>
#include <random>
#include <span>

#include "freezeframe/core/host_tensor.h"

namespace freezeframe::testing {

/// Normal(0, stddev) values rounded into t's dtype.
void fill_normal(HostTensor& t, std::mt19937& rng, float stddev = 1.0f);
/// Uniform[lo, hi) values rounded into t's dtype.
void fill_uniform(HostTensor& t, std::mt19937& rng, float lo, float hi);

/// ‖a − b‖ / ‖b‖ over the first n elements (b is the reference). NaN in `a` gives +inf.
double relative_l2(std::span<const double> a, std::span<const double> b);
/// The worst of the rows' relative L2 errors, `a` against `b` taken `width` elements a row (and
/// where a row of `b` is all zeros, that row's L2 norm of `a`): an error confined to a few rows,
/// which the whole tensor's figure averages away, shows here. Infinity for a non-finite element.
double worst_row_relative_l2(std::span<const double> a, std::span<const double> b,
                             std::size_t width);
/// Elements of t as doubles.
std::vector<double> to_doubles(const HostTensor& t);

}  // namespace freezeframe::testing
