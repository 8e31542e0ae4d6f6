#pragma once
// MetadataBuilder: turns the host description of a step into device metadata, written into
// persistent buffers (fixed addresses, sized by BatchLimits) with one host-to-device copy, so a
// captured graph reads fresh values at replay.
//
// An upload has a host half and a device half. stage() writes the step into host memory laid
// out like the device buffers (the image); the caller copies the image's used prefix to the
// device (upload() does it from the builder's own pinned staging) and then enqueues finish(),
// which spreads a compact block table to its fixed stride. finish() launches the same way for
// every step of one padded shape, so a graph may capture it with the work that follows;
// build() does all of it for a caller that runs eagerly.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <vector>

#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/backends/graph_support.h"
#include "freezeframe/core/block_size.h"
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
  /// The leading bytes of the device buffers that stage() may write (the rest, a long
  /// table's fixed-stride rows, only finish() fills): the size an image needs.
  [[nodiscard]] std::size_t image_bytes() const {
    return compact() ? layout_.block_table : layout_.total;
  }

  [[nodiscard]] GraphSupport graph_support() const { return support_; }
  [[nodiscard]] const BatchLimits& limits() const { return limits_; }

  /// Validates `common` against the limits (throws, touching nothing, when it does not fit)
  /// and writes it into `image`, host memory of image_bytes() laid out like the device
  /// buffers (zero-filled before its first stage); block-table rows the image already holds
  /// are not rewritten. With BatchLimits::num_blocks set, a block id outside the pool throws
  /// before its row is written; the image then holds some of this step's rows and nothing
  /// else of it. Returns how many leading bytes of the image the step uses: copy those to the
  /// device buffers before finish() runs. metadata() describes the step from then on.
  std::size_t stage(const CommonAttentionMetadata& common, std::byte* image);

  /// stage() into the builder's pinned staging (waiting for its previous copy out, if still
  /// running) and one copy on `stream`. finish() is left to the caller.
  const AttentionMetadata& upload(const CommonAttentionMetadata& common, cudaStream_t stream);

  /// The device half of the last stage(), enqueued on `stream` after the copy: spreads a
  /// compact block table (long rows) to its fixed stride; nothing for a short table. Its
  /// launch depends only on the limits and the padded request count, never on the data.
  void finish(cudaStream_t stream) const;

  /// upload() and finish(): the whole upload, for callers that run eagerly.
  const AttentionMetadata& build(const CommonAttentionMetadata& common, cudaStream_t stream);

  /// The step of the last stage(): device pointers and sizes.
  [[nodiscard]] const AttentionMetadata& metadata() const { return metadata_; }

 private:
  struct Layout {
    std::size_t compact_width;  ///< int32: the compact table's row length this step
    std::size_t query_start_loc, seq_lens, seq_start_loc, slot_mapping;
    std::size_t compact_table;  ///< this step's rows back to back (0 bytes when not used)
    std::size_t block_table, total;
  };
  static Layout layout_for(const BatchLimits& limits);
  void validate(const CommonAttentionMetadata& common) const;
  /// Throws when one of request `request`'s block ids lies outside the pool.
  void check_block_ids(int request, std::span<const std::int32_t> ids) const;
  /// The ids of a flat table's row that the step uses.
  [[nodiscard]] std::span<const std::int32_t> flat_row_ids(const CommonAttentionMetadata& common,
                                                           int request) const;
  [[nodiscard]] bool compact() const { return layout_.compact_table != layout_.block_table; }

  BatchLimits limits_;
  BlockSize block_size_;  ///< limits_.block_size, for the per-request arithmetic
  GraphSupport support_;
  Layout layout_;
  DeviceBuffer owned_;          // only when no device memory was given
  std::byte* device_ = nullptr;
  PinnedBuffer staging_;        // upload()'s image (the part of it that is ever copied)
  Event staging_free_;          // the previous copy out of staging has finished
  bool staging_in_flight_ = false;
  AttentionMetadata metadata_;
};

}  // namespace freezeframe
