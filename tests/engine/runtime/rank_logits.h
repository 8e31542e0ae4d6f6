#pragma once
// What a deployment's logits are held to against one rank's, step by step and row by row (a
// row: one request's `vocab` logits): the relative L2 of the whole step, the worst element
// within a tenth of its row's RMS (a fault confined to a few logits, a vocabulary shard's or a
// head's, is as large as the logits themselves, while rounding is a hundredth of them), and
// each row's greedy token (its argmax) the same, unless one rank's top two lie closer than
// twice the worst element's error there (a near-tie the rounding may flip).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include "support/random.h"

namespace freezeframe::testing {

struct RankLogitsCheck {
  double relative_l2 = 0;    ///< of the whole step
  double worst_element = 0;  ///< max |got − want| ÷ the row's RMS, over the rows
  int rows = 0;
  int near_ties = 0;  ///< rows whose argmax differs at a near-tie
};

/// Checks `got` against `want` (one rank's) with `tolerance` on the relative L2; returns the
/// figures for printing.
inline RankLogitsCheck expect_rank_logits(std::span<const float> got, std::span<const float> want,
                                          std::size_t vocab, double tolerance) {
  RankLogitsCheck check;
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(vocab > 0 && want.size() % vocab == 0)
      << want.size() << " logits are not whole rows of " << vocab;
  if (got.size() != want.size() || vocab == 0 || want.size() % vocab != 0) return check;
  std::vector<double> a(got.begin(), got.end()), b(want.begin(), want.end());
  check.relative_l2 = relative_l2(a, b);
  EXPECT_LE(check.relative_l2, tolerance);
  for (std::size_t row = 0; row * vocab < want.size(); ++row) {
    const std::span<const float> g = got.subspan(row * vocab, vocab);
    const std::span<const float> w = want.subspan(row * vocab, vocab);
    double squares = 0, worst = 0;
    for (std::size_t i = 0; i < vocab; ++i) {
      squares += double(w[i]) * w[i];
      worst = std::max(worst, std::abs(double(g[i]) - w[i]));
    }
    const double rms = std::sqrt(squares / double(vocab));
    const double relative = rms > 0 ? worst / rms : worst;
    check.worst_element = std::max(check.worst_element, relative);
    EXPECT_LE(relative, 0.1) << "row " << row << ": an element " << worst
                             << " away where the row's RMS is " << rms;
    ++check.rows;
    const auto top = std::max_element(w.begin(), w.end()) - w.begin();
    const auto chosen = std::max_element(g.begin(), g.end()) - g.begin();
    if (top == chosen) continue;
    // The gap between one rank's top logit and the one the deployment chose.
    const double gap =
        double(w[static_cast<std::size_t>(top)]) - w[static_cast<std::size_t>(chosen)];
    EXPECT_LE(gap, 2 * worst) << "row " << row << ": greedy token " << chosen << ", one rank's "
                              << top << " led by " << gap << ", more than a near-tie";
    ++check.near_ties;
  }
  return check;
}

}  // namespace freezeframe::testing
