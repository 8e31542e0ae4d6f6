#include "runtime/weight_upload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/element_value.h"
#include "freezeframe/core/nvtx.h"
#include "runtime/fp8_rows.h"

namespace freezeframe {

void quantize_rows_to_fp8(const float* values, std::int64_t rows, std::int64_t cols, std::byte* out,
                          float* scales) {
  constexpr float kE4m3Max = 448.0f;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = values + r * cols;
    float amax = 0.0f;
    for (std::int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    // The same arithmetic as the activations' quantize_rows_fp8.
    const float inv = amax > 0.0f ? kE4m3Max / amax : 1.0f;
    scales[r] = amax > 0.0f ? amax / kE4m3Max : 1.0f;
    std::byte* q = out + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = row[c] * inv;  // read before its byte (which may lie inside it) is written
      store_from_float(q + c, DType::kFp8E4M3, v);
    }
  }
}

void upload_weights(const WeightSource& source, std::span<const WeightTensor* const> tensors,
                    std::span<const TensorView> views, std::span<const WeightShard> shards,
                    std::span<const int> scale_view, std::size_t staging_bytes, cudaStream_t stream,
                    const std::function<void(std::int64_t done, std::int64_t total)>& progress) {
  const NvtxRange range("load_weights");
  FF_CHECK(tensors.size() == views.size() && (shards.empty() || shards.size() == views.size()) &&
               (scale_view.empty() || scale_view.size() == views.size()),
           ErrorCode::kInternal, tensors.size(), " checkpoint tensors, ", shards.size(),
           " shards and ", scale_view.size(), " scale views for ", views.size(), " weights");
  // An fp8 view is read in f32 and quantised on the host, its scales written beside it.
  auto fp8 = [&](std::size_t i) { return views[i].dtype() == DType::kFp8E4M3; };
  auto read_dtype = [&](std::size_t i) { return fp8(i) ? DType::kF32 : views[i].dtype(); };
  // What view i takes of its tensor: rows [first_row, first_row + rows) of which only those
  // below the tensor's rows() exist, and of each row `cols` elements from `first_col`.
  struct Part {
    std::int64_t first_row = 0, rows = 0, first_col = 0, cols = 0;
  };
  std::vector<Part> parts(views.size());
  std::int64_t total = 0, widest_row = 0;
  for (std::size_t i = 0; i < views.size(); ++i) {
    if (tensors[i] == nullptr) continue;  // scales, computed with their weight
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
    const int sv = scale_view.empty() ? -1 : scale_view[i];
    FF_CHECK(!fp8(i) || (sv >= 0 && views[sv].dtype() == DType::kF32 &&
                         views[sv].numel() == p.rows && views[sv].is_contiguous()),
             ErrorCode::kInternal, "fp8 weight view ", v.describe(), " has no f32 scales of its ",
             p.rows, " rows");
    total += static_cast<std::int64_t>(v.span_bytes()) +
             (fp8(i) ? static_cast<std::int64_t>(views[sv].span_bytes()) : 0);
    widest_row = std::max(widest_row, t.row_elements() * std::int64_t(size_of(read_dtype(i))));
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
  std::deque<std::vector<float>> scales;  // the fp8 views' scales, kept until copied
  for (std::size_t i = 0; i < views.size(); ++i) {
    if (tensors[i] == nullptr) continue;
    const WeightTensor& t = *tensors[i];
    const TensorView& v = views[i];
    const Part& p = parts[i];
    const auto elem = static_cast<std::int64_t>(size_of(read_dtype(i)));
    const std::int64_t read_bytes = t.row_elements() * elem, row_bytes = p.cols * elem;
    // What a row takes on the device: row_bytes, or one byte a value once quantised.
    const std::int64_t device_row_bytes = fp8(i) ? p.cols : row_bytes;
    if (fp8(i)) scales.emplace_back(static_cast<std::size_t>(p.rows), 1.0f);
    auto* device = static_cast<std::byte*>(v.data());
    // Rows past the tensor's end (the last vocabulary shard's padding) are zero.
    const std::int64_t present = std::clamp<std::int64_t>(t.rows() - p.first_row, 0, p.rows);
    if (present < p.rows) {
      FF_CUDA_CHECK(cudaMemsetAsync(device + present * device_row_bytes, 0,
                                    static_cast<std::size_t>((p.rows - present) * device_row_bytes),
                                    stream));
      done += (p.rows - present) * device_row_bytes;
    }
    const std::int64_t chunk_rows =
        std::max<std::int64_t>(1, half / std::max<std::int64_t>(read_bytes, 1));
    for (std::int64_t first = 0; first < present; first += chunk_rows) {
      const std::int64_t rows = std::min(chunk_rows, present - first);
      // The half's previous copy must have read it before the host overwrites it.
      if (in_flight[h]) copied[h].synchronize();
      std::byte* host = static_cast<std::byte*>(pinned.data()) + h * half;
      source.read_rows(t, p.first_row + first, rows, read_dtype(i),
                       {host, static_cast<std::size_t>(rows * read_bytes)});
      if (row_bytes != read_bytes) {
        // A column range of each row, packed in place (each row moves towards the front).
        for (std::int64_t r = 0; r < rows; ++r) {
          std::memmove(host + r * row_bytes, host + r * read_bytes + p.first_col * elem,
                       static_cast<std::size_t>(row_bytes));
        }
      }
      if (fp8(i)) {
        // In place: row r's bytes land at or before its values.
        quantize_rows_to_fp8(reinterpret_cast<const float*>(host), rows, p.cols, host,
                             scales.back().data() + first);
      }
      const auto bytes = static_cast<std::size_t>(rows * device_row_bytes);
      FF_CUDA_CHECK(cudaMemcpyAsync(device + first * device_row_bytes, host, bytes,
                                    cudaMemcpyHostToDevice, stream));
      copied[h].record(stream);
      in_flight[h] = true;
      h ^= 1;
      done += static_cast<std::int64_t>(bytes);
      if (progress) progress(done, total);
    }
    if (fp8(i)) {
      const TensorView& out = views[scale_view[i]];
      FF_CUDA_CHECK(cudaMemcpyAsync(out.data(), scales.back().data(), out.span_bytes(),
                                    cudaMemcpyHostToDevice, stream));
      done += static_cast<std::int64_t>(out.span_bytes());
      if (progress) progress(done, total);
    }
  }
  FF_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace freezeframe
