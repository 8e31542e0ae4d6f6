#pragma once
// The head sizes the tensor-core attention kernels are compiled for. The backends report this
// list and the launchers dispatch on it, so the two cannot disagree.

#include <array>
#include <cstddef>
#include <utility>

namespace freezeframe::kernels {

inline constexpr std::array<int, 3> kHeadSizes = {64, 128, 256};

/// Calls f.template operator()<D>() with D = head_size when kHeadSizes lists it; returns
/// whether it did.
template <typename F>
bool with_head_size(int head_size, F&& f) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return ((head_size == kHeadSizes[I] ? (f.template operator()<kHeadSizes[I]>(), true) : false) ||
            ...);
  }
  (std::make_index_sequence<kHeadSizes.size()>{});
}

}  // namespace freezeframe::kernels
