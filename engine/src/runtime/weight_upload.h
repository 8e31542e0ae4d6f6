#pragma once
// upload_weights: a checkpoint's tensors into the plan's weight buffers, streamed through a
// bounded pinned buffer in two halves: the host converts the next chunk of rows into one half
// while the GPU copies the other (cudaMemcpyAsync on the engine's stream, an event per half
// saying when it may be refilled). Private to runtime/.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "freezeframe/core/tensor.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/spec/tensor_parallel.h"

namespace freezeframe {

/// Copies tensors[i] (from `source`, checked by match_weights) into views[i], converted to the
/// view's dtype, through `staging_bytes` of pinned memory (each half at least one row of the
/// checkpoint's). With `shards` (one per tensor; empty: every view holds its tensor whole) a
/// view holds the tensor-parallel rank's part: a range of rows (rows past the tensor's end, the
/// vocabulary's padding, are zero), or of each row's columns. `progress(done, total)` hears
/// the bytes enqueued after each chunk. Returns once the copies are done.
/// An fp8 view (model.quantization fp8) is filled with its part's rows quantised, each by its
/// own scale (max|row| / 448, 1 for a row of zeros), and those scales go into
/// views[scale_view[i]]; a weight whose tensor is null is such scales, written that way.
/// `scale_view` (one per view, −1 for none) may be empty when no view is fp8.
void upload_weights(const WeightSource& source, std::span<const WeightTensor* const> tensors,
                    std::span<const TensorView> views, std::span<const WeightShard> shards,
                    std::span<const int> scale_view, std::size_t staging_bytes, cudaStream_t stream,
                    const std::function<void(std::int64_t done, std::int64_t total)>& progress);

}  // namespace freezeframe
