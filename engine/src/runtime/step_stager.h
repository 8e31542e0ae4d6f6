#pragma once
// StepStager: puts a validated step into the one staged image (StagingLayout) and enqueues its
// upload. It writes the program's inputs (token ids, positions, the LM head's rows, each
// request's sampling parameters and the position its token will take), the
// common attention metadata (checking the block ids of the table rows it writes against the
// pool) and each backend's plan slice (AttentionBackend::plan); one HostCopy kernel copies the
// image's head and spreads the block table, and an event right after it tells the host when
// the image may be rewritten. The upload's launch depends on the layout only, so the first
// graph of a step holds it and a replay costs the host one launch.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <vector>

#include "freezeframe/backends/backend.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/plan/staging_layout.h"
#include "freezeframe/engine/runtime/step_batch.h"
#include "freezeframe/engine/spec/deployment.h"
#include "runtime/host_copy.h"

namespace freezeframe {

class StepStager {
 public:
  /// Stages into an image laid out by `layout` whose device copy is `device` (the plan's
  /// "staging" region); `backends` are the model's backends, in the order metadata() keeps.
  StepStager(StagingLayout layout, std::byte* device, const DeploymentGeometry& geometry,
             std::vector<const AttentionBackend*> backends);
  StepStager(const StepStager&) = delete;
  StepStager& operator=(const StepStager&) = delete;

  /// Writes `batch`, validated (validate_step gave `shape`), padded to `rows` rows and `reqs`
  /// requests (Note [Padding a step]); waits first for the previous upload to have read the
  /// image. A block id outside the pool throws kInvalidArgument before anything is enqueued.
  void stage(const StepBatch& batch, const StepShape& shape, int rows, int reqs);

  /// Enqueues the upload of the staged step and the event after it.
  void enqueue_upload(cudaStream_t stream);
  /// The stream has run every upload enqueued so far (the caller synchronised it).
  void uploads_done() { in_flight_ = false; }

  /// The staged step's device metadata for each backend (its plan slice included).
  [[nodiscard]] std::span<const AttentionMetadata* const> metadata() const { return pointers_; }

 private:
  StagingLayout layout_;
  std::byte* device_;
  BatchLimits limits_;
  DcpSharding dcp_;
  int dcp_rank_ = 0;
  std::vector<const AttentionBackend*> backends_;
  std::vector<const StagingSlice*> plan_slices_;  // per backend; null when it plans nothing
  PinnedBuffer image_;
  HostCopy upload_;
  Event upload_free_{false};  // the last upload out of image_ has run (recorded after it)
  bool in_flight_ = false;
  StepMetadata step_metadata_;  // reused every step
  std::vector<AttentionMetadata> metadata_;
  std::vector<const AttentionMetadata*> pointers_;
  std::size_t token_ids_ = 0, positions_ = 0, lm_head_rows_ = 0, sampling_ = 0,
              metadata_offset_ = 0;
};

}  // namespace freezeframe
