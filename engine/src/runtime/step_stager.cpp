#include "runtime/step_stager.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/core/nvtx.h"
#include "runtime/sampler_kernel.h"

namespace freezeframe {

StepStager::StepStager(StagingLayout layout, std::byte* device, const DeploymentGeometry& geometry,
                       std::vector<const AttentionBackend*> backends)
    : layout_(std::move(layout)),
      device_(device),
      limits_(geometry.batch_limits()),
      dcp_(geometry.dcp_sharding()),
      dcp_rank_(geometry.rank.dcp_rank),
      backends_(std::move(backends)),
      image_(layout_.total_bytes),
      upload_(image_, device) {
  // Zeroed: the table's rows start as zeros (block 0 is in any pool), which stage_metadata
  // relies on to leave rows it already holds alone.
  std::memset(image_.data(), 0, image_.bytes());
  token_ids_ = layout_.slice("token_ids").offset;
  positions_ = layout_.slice("positions").offset;
  lm_head_rows_ = layout_.slice("lm_head_rows").offset;
  sampling_ = layout_.slice("sampling_params").offset;
  metadata_offset_ = layout_.slice("metadata").offset;
  const StagingSlice& table = layout_.slice("block_table");
  upload_.set_length(layout_.head_bytes);
  upload_.spread_table(metadata_offset_ + layout_.metadata.table_shape, table.offset,
                       layout_.metadata.table_stride, limits_.max_num_reqs);
  for (const AttentionBackend* b : backends_) {
    plan_slices_.push_back(layout_.find("plan." + std::string(b->name())));
  }
  metadata_.resize(backends_.size());
  for (const AttentionMetadata& m : metadata_) pointers_.push_back(&m);
}

void StepStager::stage(const StepBatch& batch, const StepShape& shape, int rows, int reqs) {
  const NvtxRange range("metadata_upload");
  // The image may still feed the previous step's upload.
  if (in_flight_) upload_free_.synchronize();
  in_flight_ = false;
  auto* image = static_cast<std::byte*>(image_.data());

  // Under DCP: this rank's shard of each request, with each request's context for the mask
  // of its prefill rows over the shard.
  step_metadata_.assign(batch, shape, dcp_, dcp_rank_, rows, reqs);
  const CommonAttentionMetadata common = step_metadata_.common();
  // The table first: its block ids may be refused, and a refused step must leave the image
  // holding no more of itself than rows of valid ids.
  const StagingSlice& table = layout_.slice("block_table");
  (void)stage_metadata(common, limits_, layout_.metadata, image + metadata_offset_,
                       reinterpret_cast<std::int32_t*>(image + table.offset));

  // Inputs: token ids and positions of the new tokens (padding rows 0), the LM head's rows.
  auto* ids = reinterpret_cast<std::int32_t*>(image + token_ids_);
  auto* positions = reinterpret_cast<std::int64_t*>(image + positions_);
  int row = 0;
  for (const StepRequest& r : batch.requests) {
    for (std::int64_t pos = r.seq_len - r.query_len; pos < r.seq_len; ++pos, ++row) {
      positions[row] = pos;
    }
  }
  if (batch.token_ids.empty()) {
    std::memset(ids, 0, sizeof(std::int32_t) * row);
  } else {
    std::memcpy(ids, batch.token_ids.data(), sizeof(std::int32_t) * row);
  }
  std::fill(ids + row, ids + rows, 0);
  std::fill(positions + row, positions + rows, 0);
  auto* lm_rows = reinterpret_cast<std::int32_t*>(image + lm_head_rows_);
  const std::span<const std::int32_t> qsl = common.query_start_loc;
  for (int r = 0; r < reqs; ++r) lm_rows[r] = r < shape.num_reqs ? qsl[r + 1] - 1 : -1;
  // Sampling: the token drawn goes to position seq_len, which keys its random draw; padded
  // requests are inactive. Written whether or not the engine samples (32 bytes a request).
  auto* sampling = reinterpret_cast<SampleRow*>(image + sampling_);
  for (int r = 0; r < reqs; ++r) {
    SampleRow row;
    if (r < shape.num_reqs) {
      const SamplingParams p = batch.sampling.empty() ? SamplingParams{} : batch.sampling[r];
      row = {p.temperature, p.top_k, p.top_p, 1, p.seed, batch.requests[r].seq_len};
    }
    sampling[r] = row;
  }

  // The attention metadata every backend reads, and each backend's own plan.
  const AttentionMetadata view =
      metadata_view(common, layout_.metadata, image + metadata_offset_, device_ + metadata_offset_,
                    reinterpret_cast<const std::int32_t*>(device_ + table.offset));
  for (std::size_t b = 0; b < backends_.size(); ++b) {
    metadata_[b] = view;
    if (const StagingSlice* slice = plan_slices_[b]) {
      backends_[b]->plan(common, {image + slice->offset, slice->bytes});
      metadata_[b].plan = device_ + slice->offset;
    }
  }
}

void StepStager::enqueue_upload(cudaStream_t stream) {
  upload_.enqueue(stream);
  upload_free_.record_external(stream);
  in_flight_ = true;
}

}  // namespace freezeframe
