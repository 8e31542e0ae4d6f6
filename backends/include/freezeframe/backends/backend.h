#pragma once
// AttentionBackend: what vLLM's AttentionBackend class says about a backend — its name, the
// factories for its impl and metadata builder, its KV-cache shape and physical stride order,
// and its capabilities. Backends are stateless singletons found by name in the registry.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "freezeframe/backends/attention_impl.h"
#include "freezeframe/backends/graph_support.h"
#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/core/device_properties.h"

namespace freezeframe {

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;

  [[nodiscard]] virtual std::string_view name() const = 0;
  /// True for multi-head latent attention backends (make_mla_impl instead of make_impl).
  [[nodiscard]] virtual bool is_mla() const = 0;

  /// Validates `params` (head size, head ratio, dtypes, features, DCP) and builds the impl.
  /// Throws kUnsupported / kInvalidArgument naming the offending field.
  [[nodiscard]] virtual std::unique_ptr<AttentionImpl> make_impl(const AttentionParams& params,
                                                                 DcpGroup dcp = {}) const;
  [[nodiscard]] virtual std::unique_ptr<MlaImpl> make_mla_impl(const MlaParams& params,
                                                               const MlaWeights& weights,
                                                               DcpGroup dcp = {}) const;
  /// See MetadataBuilder's constructor for `device_memory`.
  [[nodiscard]] virtual std::unique_ptr<MetadataBuilder> make_builder(const BatchLimits& limits,
                                                                      void* device_memory) const;
  /// Workspace bytes an impl made from `params` needs in AttentionLayer::workspace for any
  /// batch within `limits` on `device`. Stated from these inputs alone, never by asking the
  /// GPU, so a plan made without one (given the target's properties) equals the engine's.
  /// Default: none.
  [[nodiscard]] virtual std::size_t workspace_bytes(const AttentionParams& params,
                                                    const BatchLimits& limits,
                                                    const DeviceProperties& device) const;
  /// The same for an MLA impl made from `params`.
  [[nodiscard]] virtual std::size_t mla_workspace_bytes(const MlaParams& params,
                                                        const BatchLimits& limits,
                                                        const DeviceProperties& device) const;
  /// Bytes of host-planned data (tile lists, split schedules) this backend stages with every
  /// step for batches within `limits` on `device`: a slice of the step's one staged image,
  /// uploaded with the rest. Default: none.
  [[nodiscard]] virtual std::size_t plan_bytes(const BatchLimits& limits,
                                               const DeviceProperties& device) const;
  /// The plan hook: writes this step's host-planned data into `slice` (plan_bytes long, same
  /// contents every call for the same metadata) from the step's validated, padded common
  /// metadata; forwards find it on the device at AttentionMetadata::plan. Its launch shapes
  /// must not depend on it (graphs replay them). Default: nothing.
  virtual void plan(const CommonAttentionMetadata& common, std::span<std::byte> slice) const;
  /// The full-graph support level of this backend's builder.
  [[nodiscard]] virtual GraphSupport graph_support() const = 0;
  /// Under decode context parallelism, whether an impl attends prefill rows over the rank's
  /// shard, each row masked by its position in the sequence (CommonAttentionMetadata::
  /// dcp_context_lens, through the plan hook). Decode rows need nothing of the kind. Default:
  /// no (an engine then runs decode steps only under DCP).
  [[nodiscard]] virtual bool supports_dcp_prefill() const { return false; }

  /// Logical KV-cache shape for `num_blocks` blocks (MLA: num_kv_heads is 1 and head_size
  /// is the latent width).
  [[nodiscard]] virtual std::vector<std::int64_t> kv_cache_shape(std::int64_t num_blocks,
                                                                 int block_size, int num_kv_heads,
                                                                 int head_size,
                                                                 DType cache_dtype) const = 0;
  /// Physical order of the kv_cache_shape dimensions, outermost first (identity = row-major).
  [[nodiscard]] virtual std::vector<int> kv_cache_stride_order() const = 0;

  /// The impl writes into an output buffer the caller preallocated.
  [[nodiscard]] virtual bool accept_output_buffer() const = 0;
  /// The impl accepts an fp8-quantised query (the layer quantises q before calling it).
  [[nodiscard]] virtual bool supports_quant_query_input() const = 0;
  [[nodiscard]] virtual std::span<const int> supported_head_sizes() const = 0;
  [[nodiscard]] virtual std::span<const DType> supported_kv_cache_dtypes() const = 0;
  [[nodiscard]] bool supports_head_size(int head_size) const;
  [[nodiscard]] bool supports_kv_cache_dtype(DType dtype) const;
};

/// Bytes one KV cache of `num_blocks` blocks takes in `backend`'s layout.
[[nodiscard]] std::int64_t kv_cache_bytes(const AttentionBackend& backend, std::int64_t num_blocks,
                                          int block_size, int num_kv_heads, int head_size,
                                          DType cache_dtype);
/// A view of `data` (kv_cache_bytes long) as the backend's logical KV-cache shape, with the
/// strides its stride order implies.
[[nodiscard]] TensorView kv_cache_view(const AttentionBackend& backend, void* data, Device device,
                                       std::int64_t num_blocks, int block_size, int num_kv_heads,
                                       int head_size, DType cache_dtype);

}  // namespace freezeframe
