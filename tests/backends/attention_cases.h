#pragma once
// The cases attention_gpu_test.cpp runs: each backend, dtype, cache dtype, head layout and
// feature, against the double-precision host reference (attention_cases.cpp lists them).

#include <optional>
#include <ostream>
#include <vector>

#include "freezeframe/backends/attention_type.h"
#include "freezeframe/backends/synthetic_batch.h"
#include "freezeframe/base/dtype.h"

namespace freezeframe::attention_testing {

struct Case {
  const char* name;
  const char* backend = "reference";
  DType dtype = DType::kBF16;
  DType cache_dtype = DType::kBF16;
  int heads = 8, kv_heads = 2, head_size = 128, block_size = 16;
  std::vector<int> decodes = {1, 37, 160};
  std::vector<SyntheticBatchSpec::Prefill> prefills = {{53, 20}, {17, 17}};
  int padding_rows = 0;
  std::optional<int> sliding_window = std::nullopt;
  bool alibi = false;
  float softcap = 0.0f;
  bool head_major_cache = false;  // physical [2, blocks, heads, block_size, D] instead of NHD
  AttentionType type = AttentionType::kDecoder;
  /// The prefill kernel (FREEZEFRAME_PREFILL_KERNEL): "sm90", "mma_sync", or unset (auto).
  const char* prefill_kernel = nullptr;
  /// Relative L2 tolerance. bf16 outputs carry 8 significant bits (2^-9 ≈ 2e-3 relative
  /// rounding), f16 11 bits: 1e-2 and 5e-3 leave room for f32 accumulation order.
  double tolerance = 1e-2;
};

inline std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

/// Every case, named.
std::vector<Case> attention_cases();

}  // namespace freezeframe::attention_testing
