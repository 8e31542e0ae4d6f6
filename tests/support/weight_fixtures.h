#pragma once
// The checkpoint-weight fixtures (scripts/fixtures/make_weight_fixtures.py) and specs of their
// models, for the weight source's tests, and a tensor read whole through read_rows.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/checkpoints/weight_source.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::testing {

inline const std::filesystem::path& weight_fixtures() {
  static const std::filesystem::path dir = std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / "tests" /
                                           "fixtures" / "checkpoints" / "weights";
  return dir;
}

/// A spec running the checkpoint at `checkpoint` (a path under the fixtures) with its weights
/// (builtin_weights false); `extra` is appended to the model section, `cache_extra` to the
/// cache section.
inline EngineSpec weights_spec(const std::string& checkpoint, const std::string& extra = "",
                               const std::string& cache_extra = "") {
  const std::string yaml = "model:\n  checkpoint: " + checkpoint + "\n  builtin_weights: false\n" +
                           extra + "cache:\n  block_size: 16\n  memory_budget: 64MiB\n" +
                           cache_extra +
                           "scheduler:\n  max_num_seqs: 8\n  max_num_batched_tokens: 64\n"
                           "cuda_graphs:\n  mode: none\n";
  // Parsed as if it lay among the fixtures: the checkpoint path is relative to them.
  return parse_spec(yaml, (weight_fixtures() / "spec.yaml").string());
}

/// The whole tensor as `dtype`, read `chunk` rows at a time into a poisoned buffer.
inline std::vector<std::byte> read_all(const WeightSource& source, const WeightTensor& t,
                                       DType dtype, std::int64_t chunk = 1 << 30) {
  const std::int64_t row_bytes = t.row_elements() * std::int64_t(size_of(dtype));
  std::vector<std::byte> out(static_cast<std::size_t>(t.rows() * row_bytes), std::byte{0xAB});
  for (std::int64_t first = 0; first < t.rows(); first += chunk) {
    const std::int64_t n = std::min(chunk, t.rows() - first);
    source.read_rows(t, first, n, dtype,
                     {out.data() + first * row_bytes, std::size_t(n * row_bytes)});
  }
  return out;
}

}  // namespace freezeframe::testing
