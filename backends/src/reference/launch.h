#pragma once
// Host-side launchers of the reference kernels. Dtypes are runtime values here; each launcher
// dispatches to the compiled instantiations and throws kUnsupported for any other combination.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/backends/attention_params.h"
#include "freezeframe/core/tensor.h"

namespace freezeframe::reference {

/// What one attention launch computes. query [rows, H, D_qk] and output [rows, H, D_v] (and
/// lse [rows, H] f32, optional) are indexed by absolute row; the launch covers rows
/// [row_begin, row_begin + num_rows) and requests [req_begin, req_end).
struct AttentionLaunch {
  TensorView query, output, lse_ln;
  int row_begin = 0, num_rows = 0;
  int req_begin = 0, req_end = 0;
  const std::int32_t* query_start_loc = nullptr;
  const std::int32_t* seq_lens = nullptr;
  int num_heads = 0, num_kv_heads = 0, head_size_qk = 0, head_size_v = 0;
  float scale = 1.0f, softcap = 0.0f;
  int sliding_window = 0;
  bool causal = true;
  bool skip_single_token_queries = false;  ///< leave rows of one-token requests untouched
  std::span<const float> alibi_slopes;
  /// Under decode context parallelism (dcp.world_size > 1): the keys are the rank's shard of
  /// each sequence, and first_positions (device, a request each: its first new token's
  /// position in the whole sequence, positions_plan.h) gives each row's causal mask over it.
  const std::int32_t* first_positions = nullptr;
  DcpGroup dcp;
};

/// Keys and values in the paged cache: element (block, offset, head, d) at
/// block·stride_block + offset·stride_token + head·stride_head + d from k / v.
struct PagedSource {
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::kBF16;
  std::int64_t stride_block = 0, stride_token = 0, stride_head = 0;
  const std::int32_t* block_table = nullptr;
  int block_table_stride = 0;
  int block_size = 0;
  float k_scale = 1.0f, v_scale = 1.0f;
};

/// The halves k_cache / v_cache ([num_blocks, block_size, H_kv, D], any strides) of a cache of
/// `dtype` as a PagedSource for the step `md`; fp8 caches take the layer's k / v scales.
PagedSource paged_source(const TensorView& k_cache, const TensorView& v_cache, DType dtype,
                         const AttentionMetadata& md, float k_scale, float v_scale);

/// Keys and values as rows [T, H_kv, D]: request r's key j is row start[r] − start[base_req] + j
/// (start is device memory, so the bias is read at run time, never baked into a launch).
struct ContiguousSource {
  TensorView key, value;
  const std::int32_t* start = nullptr;
  int base_req = 0;
};

void launch_attention(const AttentionLaunch& launch, const PagedSource& kv, cudaStream_t stream);
void launch_attention(const AttentionLaunch& launch, const ContiguousSource& kv,
                      cudaStream_t stream);

}  // namespace freezeframe::reference
