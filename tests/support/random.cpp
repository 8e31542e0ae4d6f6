#include "support/random.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace freezeframe::testing {

void fill_normal(HostTensor& t, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
}

void fill_uniform(HostTensor& t, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
}

double relative_l2(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double err = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    err += (a[i] - b[i]) * (a[i] - b[i]);
    ref += b[i] * b[i];
  }
  return ref > 0.0 ? std::sqrt(err / ref) : std::sqrt(err);
}

double worst_row_relative_l2(std::span<const double> a, std::span<const double> b,
                             std::size_t width) {
  if (a.size() != b.size() || width == 0 || a.size() % width != 0) {
    return std::numeric_limits<double>::infinity();
  }
  double worst = 0.0;
  for (std::size_t row = 0; row < a.size(); row += width) {
    worst = std::max(worst, relative_l2(a.subspan(row, width), b.subspan(row, width)));
  }
  return worst;
}

std::vector<double> to_doubles(const HostTensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) out[i] = t.get(i);
  return out;
}

}  // namespace freezeframe::testing
