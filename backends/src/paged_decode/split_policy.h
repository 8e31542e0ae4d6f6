#pragma once
// How many KV splits a decode step gets. The count depends only on the step's row count, the
// CTAs per row and the device, never on sequence lengths, so a captured graph's launch is
// right for any lengths it replays with.

#include <algorithm>

namespace freezeframe {

struct DecodeSplitPolicy {
  int sm_count = 132;  ///< H100 SXM / H200
  int max_splits = 32;

  /// Reads the current device's multiprocessor count (132 assumed without a GPU).
  static DecodeSplitPolicy for_current_device();

  /// Enough splits to give every SM about four CTAs; one when the rows alone fill the GPU
  /// twice over.
  [[nodiscard]] int splits(int rows, int ctas_per_row) const {
    const long ctas = static_cast<long>(rows) * ctas_per_row;
    if (ctas >= 2L * sm_count) return 1;
    const long wanted = (4L * sm_count + ctas - 1) / ctas;
    return static_cast<int>(std::clamp(wanted, 1L, static_cast<long>(max_splits)));
  }
};

}  // namespace freezeframe
