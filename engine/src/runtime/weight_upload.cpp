#include "runtime/weight_upload.h"

#include <algorithm>

#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/error.h"
#include "freezeframe/core/nvtx.h"

namespace freezeframe {

void upload_weights(const WeightSource& source, std::span<const WeightTensor* const> tensors,
                    std::span<const TensorView> views, std::size_t staging_bytes,
                    cudaStream_t stream,
                    const std::function<void(std::int64_t done, std::int64_t total)>& progress) {
  const NvtxRange range("load_weights");
  FF_CHECK(tensors.size() == views.size(), ErrorCode::kInternal, tensors.size(),
           " checkpoint tensors for ", views.size(), " weights");
  std::int64_t total = 0, widest_row = 0;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const WeightTensor& t = *tensors[i];
    const TensorView& v = views[i];
    FF_CHECK(v.defined() && v.is_contiguous() && v.numel() == t.rows() * t.row_elements(),
             ErrorCode::kInternal, "weight view ", v.defined() ? v.describe() : "(none)",
             " does not hold tensor ", t.describe());
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
    const std::int64_t row_bytes = t.row_elements() * std::int64_t(size_of(v.dtype()));
    const std::int64_t chunk_rows =
        std::max<std::int64_t>(1, half / std::max<std::int64_t>(row_bytes, 1));
    for (std::int64_t first = 0; first < t.rows(); first += chunk_rows) {
      const std::int64_t rows = std::min(chunk_rows, t.rows() - first);
      const auto bytes = static_cast<std::size_t>(rows * row_bytes);
      // The half's previous copy must have read it before the host overwrites it.
      if (in_flight[h]) copied[h].synchronize();
      std::byte* host = static_cast<std::byte*>(pinned.data()) + h * half;
      source.read_rows(t, first, rows, v.dtype(), {host, bytes});
      FF_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(v.data()) + first * row_bytes, host,
                                    bytes, cudaMemcpyHostToDevice, stream));
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
