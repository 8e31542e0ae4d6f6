#pragma once
// MetadataBuilder: turns the host description of a step into device metadata, written into
// persistent buffers (fixed addresses, sized by BatchLimits) with one host-to-device copy, so a
// captured graph reads fresh values at replay.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/backends/graph_support.h"
#include "freezeframe/core/cuda_handles.h"

namespace freezeframe {

class MetadataBuilder {
 public:
  /// `device_memory` must hold device_bytes(limits) bytes for the builder's lifetime; pass
  /// nullptr to let the builder allocate its own (tools and tests; the engine passes planned
  /// memory).
  MetadataBuilder(const BatchLimits& limits, GraphSupport support, void* device_memory);
  virtual ~MetadataBuilder() = default;
  MetadataBuilder(const MetadataBuilder&) = delete;
  MetadataBuilder& operator=(const MetadataBuilder&) = delete;

  /// Device bytes the persistent buffers need for `limits`.
  [[nodiscard]] static std::size_t device_bytes(const BatchLimits& limits);

  [[nodiscard]] GraphSupport graph_support() const { return support_; }
  [[nodiscard]] const BatchLimits& limits() const { return limits_; }

  /// Validates `common` against the limits (throws, touching nothing, when it does not fit),
  /// stages it in pinned memory and enqueues one copy on `stream`. Where the block table's
  /// fixed-stride rows are long (a long max model length), the copy carries the step's rows
  /// back to back and a small kernel spreads them to the fixed stride.
  virtual const AttentionMetadata& build(const CommonAttentionMetadata& common,
                                         cudaStream_t stream);

 private:
  struct Layout {
    std::size_t query_start_loc, seq_lens, seq_start_loc, slot_mapping;
    std::size_t compact_table;  ///< this step's rows back to back (0 bytes when not used)
    std::size_t block_table, total;
  };
  static Layout layout_for(const BatchLimits& limits);
  void validate(const CommonAttentionMetadata& common) const;

  BatchLimits limits_;
  GraphSupport support_;
  Layout layout_;
  DeviceBuffer owned_;          // only when no device memory was given
  std::byte* device_ = nullptr;
  PinnedBuffer staging_;
  Event staging_free_;          // the previous copy out of staging has finished
  bool staging_in_flight_ = false;
  std::vector<std::int32_t> query_start_loc_host_;
  std::vector<std::int32_t> seq_lens_host_;
  AttentionMetadata metadata_;
};

}  // namespace freezeframe
