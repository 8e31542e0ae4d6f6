#include "runtime/weight_upload.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/nvtx.h"

namespace freezeframe {

void upload_weights(const WeightSource& source, std::span<const WeightTensor* const> tensors,
                    std::span<const TensorView> views, std::span<const WeightShard> shards,
                    std::size_t staging_bytes, cudaStream_t stream,
                    const std::function<void(std::int64_t done, std::int64_t total)>& progress) {
  const NvtxRange range("load_weights");
  FF_CHECK(tensors.size() == views.size() && (shards.empty() || shards.size() == views.size()),
           ErrorCode::kInternal, tensors.size(), " checkpoint tensors and ", shards.size(),
           " shards for ", views.size(), " weights");
  // What view i takes of its tensor: rows [first_row, first_row + rows) of which only those
  // below the tensor's rows() exist, and of each row `cols` elements from `first_col`.
  struct Part {
    std::int64_t first_row = 0, rows = 0, first_col = 0, cols = 0;
  };
  std::vector<Part> parts(views.size());
  std::int64_t total = 0, widest_row = 0;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const WeightTensor& t = *tensors[i];
    const TensorView& v = views[i];
    const WeightShard shard = shards.empty() ? WeightShard{} : shards[i];
    Part& p = parts[i];
    p.rows = t.rows();
    p.cols = t.row_elements();
    if (shard.axis == 1) {
      p.first_col = shard.offset;
      p.cols = v.numel() / std::max<std::int64_t>(p.rows, 1);
    } else if (shard.axis == 0) {
      p.first_row = shard.offset;
      p.rows = v.numel() / std::max<std::int64_t>(p.cols, 1);
    }
    FF_CHECK(v.defined() && v.is_contiguous() && v.numel() == p.rows * p.cols &&
                 p.first_col + p.cols <= t.row_elements(),
             ErrorCode::kInternal, "weight view ", v.defined() ? v.describe() : "(none)",
             " does not hold its part of tensor ", t.describe());
    total += static_cast<std::int64_t>(v.span_bytes());
    widest_row = std::max(widest_row, t.row_elements() * std::int64_t(size_of(v.dtype())));
  }
  const auto half =
      std::max(static_cast<std::int64_t>(staging_bytes / 2), std::max<std::int64_t>(widest_row, 1));
  const PinnedBuffer pinned(static_cast<std::size_t>(2 * half));
  // Leaving early (a read that throws) must not free the pinned halves under a copy.
  struct Drain {
    cudaStream_t stream;
    ~Drain() { FF_CUDA_WARN(cudaStreamSynchronize(stream)); }
  } drain{stream};
  Event copied[2];  // recorded after each half's last copy
  bool in_flight[2] = {false, false};
  int h = 0;
  std::int64_t done = 0;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const WeightTensor& t = *tensors[i];
    const TensorView& v = views[i];
    const Part& p = parts[i];
    const auto elem = static_cast<std::int64_t>(size_of(v.dtype()));
    const std::int64_t read_bytes = t.row_elements() * elem, row_bytes = p.cols * elem;
    auto* device = static_cast<std::byte*>(v.data());
    // Rows past the tensor's end (the last vocabulary shard's padding) are zero.
    const std::int64_t present = std::clamp<std::int64_t>(t.rows() - p.first_row, 0, p.rows);
    if (present < p.rows) {
      FF_CUDA_CHECK(cudaMemsetAsync(device + present * row_bytes, 0,
                                    static_cast<std::size_t>((p.rows - present) * row_bytes),
                                    stream));
      done += (p.rows - present) * row_bytes;
    }
    const std::int64_t chunk_rows =
        std::max<std::int64_t>(1, half / std::max<std::int64_t>(read_bytes, 1));
    for (std::int64_t first = 0; first < present; first += chunk_rows) {
      const std::int64_t rows = std::min(chunk_rows, present - first);
      // The half's previous copy must have read it before the host overwrites it.
      if (in_flight[h]) copied[h].synchronize();
      std::byte* host = static_cast<std::byte*>(pinned.data()) + h * half;
      source.read_rows(t, p.first_row + first, rows, v.dtype(),
                       {host, static_cast<std::size_t>(rows * read_bytes)});
      if (row_bytes != read_bytes) {
        // A column range of each row, packed in place (each row moves towards the front).
        for (std::int64_t r = 0; r < rows; ++r) {
          std::memmove(host + r * row_bytes, host + r * read_bytes + p.first_col * elem,
                       static_cast<std::size_t>(row_bytes));
        }
      }
      const auto bytes = static_cast<std::size_t>(rows * row_bytes);
      FF_CUDA_CHECK(
          cudaMemcpyAsync(device + first * row_bytes, host, bytes, cudaMemcpyHostToDevice, stream));
      copied[h].record(stream);
      in_flight[h] = true;
      h ^= 1;
      done += static_cast<std::int64_t>(bytes);
      if (progress) progress(done, total);
    }
  }
  FF_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace freezeframe
