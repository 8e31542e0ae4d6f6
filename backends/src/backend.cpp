#include "freezeframe/backends/backend.h"

#include <algorithm>

#include "freezeframe/base/error.h"

namespace freezeframe {

std::unique_ptr<AttentionImpl> AttentionBackend::make_impl(const AttentionParams&, DcpGroup) const {
  FF_THROW(ErrorCode::kUnsupported, "backend '", name(),
           "' is a multi-head latent attention backend: use make_mla_impl");
}

std::unique_ptr<MlaImpl> AttentionBackend::make_mla_impl(const MlaParams&, const MlaWeights&,
                                                         DcpGroup) const {
  FF_THROW(ErrorCode::kUnsupported, "backend '", name(),
           "' does not implement multi-head latent attention: use make_impl");
}

std::size_t AttentionBackend::workspace_bytes(const AttentionParams&, const BatchLimits&,
                                              const DeviceProperties&) const {
  return 0;
}

std::size_t AttentionBackend::mla_workspace_bytes(const MlaParams&, const BatchLimits&,
                                                  const DeviceProperties&) const {
  return 0;
}

std::size_t AttentionBackend::plan_bytes(const BatchLimits&, const DeviceProperties&) const {
  return 0;
}

void AttentionBackend::plan(const CommonAttentionMetadata&, std::span<std::byte>) const {}

std::unique_ptr<MetadataBuilder> AttentionBackend::make_builder(const BatchLimits& limits,
                                                                void* device_memory) const {
  return std::make_unique<MetadataBuilder>(limits, graph_support(), device_memory, this);
}

bool AttentionBackend::supports_head_size(int head_size) const {
  const auto sizes = supported_head_sizes();
  return std::find(sizes.begin(), sizes.end(), head_size) != sizes.end();
}

bool AttentionBackend::supports_kv_cache_dtype(DType dtype) const {
  const auto dtypes = supported_kv_cache_dtypes();
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

std::int64_t kv_cache_bytes(const AttentionBackend& backend, std::int64_t num_blocks,
                            int block_size, int num_kv_heads, int head_size, DType cache_dtype) {
  const auto shape =
      backend.kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype);
  std::int64_t elements = 1;
  for (std::int64_t s : shape) elements *= s;
  return elements * static_cast<std::int64_t>(size_of(cache_dtype));
}

TensorView kv_cache_view(const AttentionBackend& backend, void* data, Device device,
                         std::int64_t num_blocks, int block_size, int num_kv_heads, int head_size,
                         DType cache_dtype) {
  const auto shape =
      backend.kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype);
  const auto order = backend.kv_cache_stride_order();
  FF_CHECK(order.size() == shape.size(), ErrorCode::kInternal, "backend '", backend.name(),
           "' stride order has ", order.size(), " entries for a ", shape.size(), "-d shape");
  // Lay the dimensions out physically in `order` (outermost first), then read the strides
  // back in logical order.
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= shape[*it];
  }
  return TensorView::strided(data, cache_dtype, shape, strides, device);
}

}  // namespace freezeframe
