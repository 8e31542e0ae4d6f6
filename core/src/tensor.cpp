#include "freezeframe/core/tensor.h"

#include "freezeframe/base/error.h"

namespace freezeframe {

TensorView::TensorView(void* data, DType dtype, std::span<const std::int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  FF_CHECK(shape.size() <= kMaxDims, ErrorCode::kInvalidArgument, "a tensor has at most ", kMaxDims,
           " dimensions, got ", shape.size());
  std::int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    FF_CHECK(shape[d] >= 0, ErrorCode::kInvalidArgument, "dimension ", d, " is negative (",
             shape[d], ")");
    shape_[d] = shape[d];
    strides_[d] = stride;
    stride *= shape[d];
  }
}

TensorView TensorView::strided(void* data, DType dtype, std::span<const std::int64_t> shape,
                               std::span<const std::int64_t> strides, Device device) {
  FF_CHECK(shape.size() == strides.size(), ErrorCode::kInvalidArgument, "shape has ", shape.size(),
           " dimensions but strides has ", strides.size());
  TensorView view(data, dtype, shape, device);
  for (size_t d = 0; d < strides.size(); ++d) {
    FF_CHECK(strides[d] >= 0, ErrorCode::kInvalidArgument, "stride ", d, " is negative");
    view.strides_[d] = strides[d];
  }
  return view;
}

int TensorView::checked_dim(int d) const {
  FF_CHECK(d >= 0 && d < rank_, ErrorCode::kInvalidArgument, "dimension ", d,
           " out of range for a ", rank_, "-d tensor");
  return d;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < rank_; ++d) n *= shape_[d];
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t expected = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

std::int64_t TensorView::span_bytes() const {
  if (numel() == 0) return 0;
  std::int64_t last = 0;
  for (int d = 0; d < rank_; ++d) last += (shape_[d] - 1) * strides_[d];
  return (last + 1) * static_cast<std::int64_t>(size_of(dtype_));
}

TensorView TensorView::select(int d, std::int64_t index) const {
  checked_dim(d);
  FF_CHECK(index >= 0 && index < shape_[d], ErrorCode::kInvalidArgument, "index ", index,
           " out of range for dimension ", d, " of ", describe());
  TensorView out = *this;
  out.data_ = static_cast<std::uint8_t*>(data_) +
              index * strides_[d] * static_cast<std::int64_t>(size_of(dtype_));
  for (int i = d; i + 1 < rank_; ++i) {
    out.shape_[i] = shape_[i + 1];
    out.strides_[i] = strides_[i + 1];
  }
  out.rank_ = rank_ - 1;
  return out;
}

TensorView TensorView::narrow(int d, std::int64_t start, std::int64_t length) const {
  checked_dim(d);
  FF_CHECK(start >= 0 && length >= 0 && start <= shape_[d] && length <= shape_[d] - start,
           ErrorCode::kInvalidArgument, "elements [", start, ", ", start, " + ", length,
           ") are outside dimension ", d, " of ", describe());
  TensorView out = *this;
  out.data_ = static_cast<std::uint8_t*>(data_) +
              start * strides_[d] * static_cast<std::int64_t>(size_of(dtype_));
  out.shape_[d] = length;
  return out;
}

TensorView TensorView::unflatten(int d, std::int64_t outer) const {
  checked_dim(d);
  FF_CHECK(rank_ < kMaxDims, ErrorCode::kInvalidArgument, "cannot split a dimension of ",
           describe(), ": it has the most dimensions a view may have");
  FF_CHECK(outer > 0 && shape_[d] % outer == 0, ErrorCode::kInvalidArgument,
           "cannot split dimension ", d, " of ", describe(), " into ", outer, " parts");
  TensorView out = *this;
  for (int i = rank_; i > d + 1; --i) {
    out.shape_[i] = shape_[i - 1];
    out.strides_[i] = strides_[i - 1];
  }
  out.shape_[d] = outer;
  out.shape_[d + 1] = shape_[d] / outer;
  out.strides_[d] = strides_[d] * out.shape_[d + 1];
  out.strides_[d + 1] = strides_[d];
  out.rank_ = rank_ + 1;
  return out;
}

TensorView TensorView::reshape(std::span<const std::int64_t> shape) const {
  FF_CHECK(is_contiguous(), ErrorCode::kInvalidArgument, "cannot reshape the strided view ",
           describe());
  TensorView out(data_, dtype_, shape, device_);
  FF_CHECK(out.numel() == numel(), ErrorCode::kInvalidArgument, "cannot reshape ", describe(),
           " to ", out.describe(), ": element counts differ");
  return out;
}

std::string TensorView::describe() const {
  std::string out(name_of(dtype_));
  out += "[";
  for (int d = 0; d < rank_; ++d) {
    if (d) out += ", ";
    out += std::to_string(shape_[d]);
  }
  out += "]";
  if (!is_contiguous()) out += " (strided)";
  return out;
}

}  // namespace freezeframe
