#pragma once
// Staging a step's attention metadata: its host description (CommonAttentionMetadata) written
// into a staged image laid out like the device buffers it is copied to, so a captured graph
// reads fresh values at replay.
//
// MetadataLayout places the metadata: a head copied as it is (the sizes of this step's block
// table, query_start_loc, seq_lens, seq_start_loc, slot_mapping), then the block table: in
// the image this step's rows back to back, each as wide as the step's longest (a decode step
// stages kilobytes, not the whole table), on the device at the fixed stride the kernels read.
// The copy that spreads the rows reads their count and width from the image, so its launch
// depends on the limits only.
//
// stage_metadata() and metadata_view() are what an engine's one staged image uses (its
// image holds other slices too); MetadataBuilder does the same over buffers of its own, for
// callers that run attention on its own (tests, benchmarks, tools).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/backends/graph_support.h"
#include "freezeframe/core/cuda_handles.h"

namespace freezeframe {

/// Byte offsets from the start of a metadata head (image and device alike), and the table.
struct MetadataLayout {
  std::size_t table_shape = 0;  ///< int32 [2]: this step's table rows and width
  std::size_t query_start_loc = 0;
  std::size_t seq_lens = 0;
  std::size_t seq_start_loc = 0;
  std::size_t slot_mapping = 0;
  std::size_t head_bytes = 0;   ///< the head's size, a multiple of 256
  int table_stride = 0;         ///< int32 per device row (BatchLimits::max_blocks_per_req)
  std::size_t table_bytes = 0;  ///< max_num_reqs rows of table_stride int32

  /// The layout for batches within `limits`; throws kInvalidArgument for non-positive limits.
  [[nodiscard]] static MetadataLayout of(const BatchLimits& limits);
};

/// Checks `common` against `limits` (counts, lengths, decodes first, block-table rows long
/// enough); throws kInvalidArgument naming the request and field.
void validate_metadata(const CommonAttentionMetadata& common, const BatchLimits& limits);

/// Writes a valid `common` into `head` (layout.head_bytes) and `table` (host rows, room for
/// layout.table_bytes; zero-filled before its first stage). Rows `table` already holds are not
/// rewritten (a decode step changes about one in block_size), and only rows written have their
/// block ids checked against limits.num_blocks (when set), so a refused step leaves the table
/// holding valid ids only. Returns the table bytes the step uses.
std::size_t stage_metadata(const CommonAttentionMetadata& common, const BatchLimits& limits,
                           const MetadataLayout& layout, std::byte* head, std::int32_t* table);

/// The device view of the step last staged into `head`: device pointers into `device_head` and
/// `device_table` (where the head and the spread table are copied), sizes from `common`, and
/// host spans into `head`.
[[nodiscard]] AttentionMetadata metadata_view(const CommonAttentionMetadata& common,
                                              const MetadataLayout& layout, const std::byte* head,
                                              const std::byte* device_head,
                                              const std::int32_t* device_table);

class AttentionBackend;

class MetadataBuilder {
 public:
  /// `device_memory` must hold device_bytes(limits) bytes for the builder's lifetime; pass
  /// nullptr to let the builder allocate its own. With a `planner`, every build also runs its
  /// plan hook (AttentionBackend::plan) into a plan buffer of the builder's own, which
  /// AttentionMetadata::plan then points to.
  MetadataBuilder(const BatchLimits& limits, GraphSupport support, void* device_memory,
                  const AttentionBackend* planner = nullptr);
  MetadataBuilder(const MetadataBuilder&) = delete;
  MetadataBuilder& operator=(const MetadataBuilder&) = delete;

  /// Device bytes for `limits`: the head, then the table at its fixed stride.
  [[nodiscard]] static std::size_t device_bytes(const BatchLimits& limits);
  /// Host bytes of an image: the head, then room for the table's rows.
  [[nodiscard]] std::size_t image_bytes() const { return layout_.head_bytes + layout_.table_bytes; }
  /// Bytes of the planner's plan (0 without a planner); the pinned image holds it after the
  /// table's room.
  [[nodiscard]] std::size_t plan_bytes() const { return plan_bytes_; }

  [[nodiscard]] GraphSupport graph_support() const { return support_; }
  [[nodiscard]] const BatchLimits& limits() const { return limits_; }
  [[nodiscard]] const MetadataLayout& layout() const { return layout_; }

  /// Validates `common` (throws, touching nothing, when it does not fit) and stages it into
  /// `image` (image_bytes(), zero-filled before its first stage). Returns how many leading
  /// bytes of the image the step uses. metadata() describes the step from then on.
  std::size_t stage(const CommonAttentionMetadata& common, std::byte* image);

  /// stage() into the builder's pinned image (waiting for its previous copy out, if still
  /// running) and its copies on `stream`: the head, and the rows spread to their stride.
  const AttentionMetadata& build(const CommonAttentionMetadata& common, cudaStream_t stream);

  /// The step of the last stage(): device pointers and sizes.
  [[nodiscard]] const AttentionMetadata& metadata() const { return metadata_; }

 private:
  BatchLimits limits_;
  GraphSupport support_;
  MetadataLayout layout_;
  DeviceBuffer owned_;  // only when no device memory was given
  std::byte* device_ = nullptr;
  PinnedBuffer staging_;
  Event staging_free_;  // the previous copy out of staging has finished
  bool staging_in_flight_ = false;
  AttentionMetadata metadata_;
  const AttentionBackend* planner_ = nullptr;
  std::size_t plan_bytes_ = 0;
  DeviceBuffer plan_device_;
};

}  // namespace freezeframe
