// The cache write: new key/value rows go to their slots in the paged cache.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/error.h"
#include "reference/launch.h"

namespace freezeframe::reference {
namespace {

using kernels::from_float;
using kernels::to_float;

struct CacheWriteParams {
  const void* key;
  const void* value;
  std::int64_t key_stride_token, key_stride_head, value_stride_token, value_stride_head;
  void* k_cache;
  void* v_cache;
  std::int64_t stride_block, stride_token, stride_head;
  const std::int64_t* slot_mapping;
  int block_size, num_kv_heads, head_size;
  float inv_k_scale, inv_v_scale;
};

// One CTA per row; slot −1 (padding, or a token another DCP rank owns) writes nothing.
template <typename T, typename CacheT>
__global__ void reshape_and_cache_kernel(const __grid_constant__ CacheWriteParams p) {
  const std::int64_t slot = p.slot_mapping[blockIdx.x];
  if (slot < 0) return;
  const std::int64_t block = slot / p.block_size;
  const std::int64_t offset = slot % p.block_size;
  const auto* key = static_cast<const T*>(p.key);
  const auto* value = static_cast<const T*>(p.value);
  auto* k_cache = static_cast<CacheT*>(p.k_cache);
  auto* v_cache = static_cast<CacheT*>(p.v_cache);
  const int elements = p.num_kv_heads * p.head_size;
  for (int e = threadIdx.x; e < elements; e += blockDim.x) {
    const int head = e / p.head_size, d = e % p.head_size;
    const std::int64_t dst =
        block * p.stride_block + offset * p.stride_token + head * p.stride_head + d;
    const float k = to_float(key[blockIdx.x * p.key_stride_token + head * p.key_stride_head + d]);
    const float v =
        to_float(value[blockIdx.x * p.value_stride_token + head * p.value_stride_head + d]);
    k_cache[dst] = from_float<CacheT>(k * p.inv_k_scale);
    v_cache[dst] = from_float<CacheT>(v * p.inv_v_scale);
  }
}

template <typename T, typename CacheT>
void launch(const CacheWriteParams& p, int num_slots, cudaStream_t stream) {
  reshape_and_cache_kernel<T, CacheT><<<num_slots, 128, 0, stream>>>(p);
  FF_CHECK_LAUNCH();
}

}  // namespace

void launch_reshape_and_cache(const TensorView& key, const TensorView& value,
                              const TensorView& k_cache, const TensorView& v_cache,
                              const std::int64_t* slot_mapping, int num_slots, float k_scale,
                              float v_scale, cudaStream_t stream) {
  if (num_slots == 0) return;
  CacheWriteParams p{};
  p.key = key.data();
  p.value = value.data();
  p.key_stride_token = key.stride(0);
  p.key_stride_head = key.stride(1);
  p.value_stride_token = value.stride(0);
  p.value_stride_head = value.stride(1);
  p.k_cache = k_cache.data();
  p.v_cache = v_cache.data();
  p.stride_block = k_cache.stride(0);
  p.stride_token = k_cache.stride(1);
  p.stride_head = k_cache.stride(2);
  p.slot_mapping = slot_mapping;
  p.block_size = static_cast<int>(k_cache.size(1));
  p.num_kv_heads = static_cast<int>(key.size(1));
  p.head_size = static_cast<int>(key.size(2));
  p.inv_k_scale = 1.0f / k_scale;
  p.inv_v_scale = 1.0f / v_scale;

  const DType in = key.dtype(), cache = k_cache.dtype();
  if (in == DType::kBF16 && cache == DType::kBF16)
    return launch<__nv_bfloat16, __nv_bfloat16>(p, num_slots, stream);
  if (in == DType::kF16 && cache == DType::kF16)
    return launch<__half, __half>(p, num_slots, stream);
  if (in == DType::kBF16 && cache == DType::kFp8E4M3)
    return launch<__nv_bfloat16, __nv_fp8_e4m3>(p, num_slots, stream);
  if (in == DType::kF16 && cache == DType::kFp8E4M3)
    return launch<__half, __nv_fp8_e4m3>(p, num_slots, stream);
  FF_THROW(ErrorCode::kUnsupported, "cache write from ", name_of(in), " into a ", name_of(cache),
           " cache is not supported");
}

}  // namespace freezeframe::reference
