#pragma once
// How many KV splits a decode step gets. The count depends only on the step's row count, the
// CTAs per row, the device and the deployment's longest sequence, never on the step's
// sequence lengths, so a captured graph's launch is right for any lengths it replays with.

#include <algorithm>
#include <limits>

#include "freezeframe/core/device_properties.h"
#include "paged_decode/decode_params.h"

namespace freezeframe {

struct DecodeSplitPolicy {
  int sm_count = 132;  ///< H100 SXM / H200
  int max_splits = paged_decode::kMaxSplits;
  /// CTAs of the decode kernel an SM holds at once (its occupancy: 3 for head size 128 on
  /// the H200); the impl reads it from the device for its own kernel.
  int resident_ctas_per_sm = 3;
  /// A split's fixed cost (starting up, writing its partial state, its share of the combine),
  /// in 16-token tiles of KV read.
  int split_cost_tiles = 4;
  /// A split covers at least this many positions of the longest sequence the step may hold.
  int min_tokens_per_split = 256;

  /// Reads the current device's multiprocessor count (132 assumed without a GPU).
  static DecodeSplitPolicy for_current_device();
  /// The policy for a device of these properties.
  static DecodeSplitPolicy for_device(const DeviceProperties& device);

  /// At most about this many CTAs per SM in total: real sequences are usually far shorter
  /// than the longest the deployment allows, and each split beyond what fills the GPU costs
  /// them its fixed overhead.
  int ctas_per_sm = 16;

  /// Among the split counts that keep the launch within ctas_per_sm CTAs per SM and that the
  /// longest possible sequence can use (max_seq_tokens: the block table's row length × the
  /// block size, a property of the deployment), the one that minimises the modelled time of
  /// a launch of such sequences: waves of resident CTAs (a partial last wave leaves bandwidth
  /// unused) × the tiles a CTA reads plus its fixed cost. Ties go to fewer splits.
  [[nodiscard]] int splits(int rows, int ctas_per_row, long max_seq_tokens) const {
    const long ctas = std::max(1L, static_cast<long>(rows) * ctas_per_row);
    const long slots = std::max(1L, static_cast<long>(sm_count) * resident_ctas_per_sm);
    const long tiles = std::max(1L, (max_seq_tokens + 15) / 16);
    const long most = most_splits(rows, ctas_per_row, max_seq_tokens);
    long best = 1, best_cost = std::numeric_limits<long>::max();
    for (long s = 1; s <= most; ++s) {
      const long waves = (ctas * s + slots - 1) / slots;
      const long cost = waves * ((tiles + s - 1) / s + split_cost_tiles);
      if (cost < best_cost) {
        best = s;
        best_cost = cost;
      }
    }
    return static_cast<int>(best);
  }

  /// The bound splits() chooses within: it depends on the SM count but not on the kernel's
  /// occupancy, so workspaces sized by it need no GPU to be stated.
  [[nodiscard]] int most_splits(int rows, int ctas_per_row, long max_seq_tokens) const {
    const long ctas = std::max(1L, static_cast<long>(rows) * ctas_per_row);
    const long useful = (max_seq_tokens + min_tokens_per_split - 1) / min_tokens_per_split;
    const long filling = (static_cast<long>(ctas_per_sm) * sm_count + ctas - 1) / ctas;
    return static_cast<int>(std::clamp(std::min({useful, filling, static_cast<long>(max_splits)}),
                                       1L, static_cast<long>(max_splits)));
  }
};

}  // namespace freezeframe
