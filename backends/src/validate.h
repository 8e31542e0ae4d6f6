#pragma once
// Argument checks shared by the backends. Each throws freezeframe::Error naming the argument
// and what was expected; none touches the device, so a rejected call changes nothing.

#include <string_view>

#include "freezeframe/backends/attention_params.h"
#include "freezeframe/backends/backend.h"
#include "freezeframe/core/tensor.h"

namespace freezeframe {

/// Head counts, head size against the backend's list, scale, cache dtype, ALiBi, window, cap.
void check_common_params(const AttentionBackend& backend, const AttentionParams& params);
/// A DCP group of world size > 1 needs an impl that can return LSE.
void check_dcp(const DcpGroup& dcp, bool can_return_lse, std::string_view backend);
/// What needs a key's position, which some layers do not have: cross attention (the keys are
/// the encoder's) and a rank's DCP shard (a key's index there is not its position) take
/// neither ALiBi nor a sliding window.
void check_positional_features(const AttentionParams& params, const DcpGroup& dcp,
                               std::string_view backend);

/// query: CUDA, f16 or bf16, [rows, heads, head_size] with unit stride in the last dimension.
void check_query(const TensorView& query, std::string_view what, int rows, int heads,
                 int head_size);
/// output: CUDA, `dtype`, contiguous [rows, heads, head_size] or [rows, heads·head_size];
/// returned as the 3-d view.
[[nodiscard]] TensorView output_as_3d(const TensorView& output, DType dtype, int rows, int heads,
                                      int head_size);
/// lse (when defined): CUDA f32 [rows, heads], unit stride over heads.
void check_lse(const TensorView& lse, int rows, int heads);
/// key or value rows: CUDA, `dtype`, [rows, kv_heads, head_size], unit stride last.
void check_kv_rows(const TensorView& t, std::string_view what, DType dtype, int rows, int kv_heads,
                   int head_size);
/// kv_cache: CUDA, `dtype`, [2, num_blocks, block_size, kv_heads, head_size], unit stride last.
void check_kv_cache(const TensorView& kv_cache, DType dtype, int kv_heads, int head_size);

}  // namespace freezeframe
