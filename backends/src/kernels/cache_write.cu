// The cache write: new key/value rows go to their slots in the paged cache, 8 consecutive
// elements of a head at a time (16 bytes of 16-bit input) when the layouts allow it, so a
// long prefill chunk is written near the copy bandwidth; element by element otherwise.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/cuda_check.h"
#include "kernels/cache_write.h"

namespace freezeframe::kernels {
namespace {

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

/// Eight elements of the cache's type, aligned as one vector store (16 bytes of a 16-bit
/// cache, 8 of fp8): without the alignment the compiler stores them one element at a time,
/// eight partial-sector stores an item, which held the write to a third of the copy bandwidth.
template <typename CacheT>
struct alignas(8 * sizeof(CacheT)) Pack8 {
  CacheT v[8];
};

// The same with 8 elements an item: one 16-byte load of each input, one store of 8 cache
// elements (16 bytes, or 8 for an fp8 cache). The step's rows are one flat range of items
// (token, group of 8); a CTA takes kVec8Items · kVec8Threads consecutive ones, and each thread
// issues the loads of its kVec8Items items before their stores, so enough bytes are in flight
// to approach the copy bandwidth (one CTA per row with one item a thread reached a quarter).
// Indices are 32-bit (the host checks that the items and the cache's slots fit), as 64-bit
// division is a long software sequence.
constexpr int kVec8Threads = 128;
constexpr int kVec8Items = 4;

template <typename T, typename CacheT>
__global__ void __launch_bounds__(kVec8Threads)
    reshape_and_cache_vec8_kernel(const __grid_constant__ CacheWriteParams p, int num_slots) {
  const auto vectors = static_cast<std::uint32_t>(p.num_kv_heads * p.head_size / 8);  // a row
  const std::uint32_t total = static_cast<std::uint32_t>(num_slots) * vectors;
  const std::uint32_t first = blockIdx.x * kVec8Threads * kVec8Items + threadIdx.x;
  const auto block_size = static_cast<std::uint32_t>(p.block_size);
  const auto group_of_head = static_cast<std::uint32_t>(p.head_size / 8);
  // The slots, keys and values are loaded together (a store needs its slot, a load does not),
  // so one memory latency, not two, comes before the stores.
  uint4 k[kVec8Items], v[kVec8Items];
  std::int64_t slot[kVec8Items];
  std::int64_t in_head[kVec8Items];  // the item's offset within its token's cache row
#pragma unroll
  for (int u = 0; u < kVec8Items; ++u) {
    const std::uint32_t item = first + u * kVec8Threads;
    slot[u] = -1;
    if (item >= total) continue;
    const std::uint32_t token = item / vectors;
    const std::uint32_t e = item - token * vectors;
    const std::uint32_t head = e / group_of_head, d = (e - head * group_of_head) * 8;
    in_head[u] = head * p.stride_head + d;
    slot[u] = p.slot_mapping[token];
    k[u] = *reinterpret_cast<const uint4*>(
        static_cast<const T*>(p.key) + token * p.key_stride_token + head * p.key_stride_head + d);
    v[u] = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.value) +
                                           token * p.value_stride_token +
                                           head * p.value_stride_head + d);
  }
#pragma unroll
  for (int u = 0; u < kVec8Items; ++u) {
    if (slot[u] < 0) continue;  // past the end, padding, or a token another DCP rank owns
    const std::uint32_t block = static_cast<std::uint32_t>(slot[u]) / block_size;
    const std::uint32_t offset = static_cast<std::uint32_t>(slot[u]) - block * block_size;
    const std::int64_t dst = block * p.stride_block + offset * p.stride_token + in_head[u];
    const T* ks = reinterpret_cast<const T*>(&k[u]);
    const T* vs = reinterpret_cast<const T*>(&v[u]);
    Pack8<CacheT> ko, vo;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      ko.v[i] = from_float<CacheT>(to_float(ks[i]) * p.inv_k_scale);
      vo.v[i] = from_float<CacheT>(to_float(vs[i]) * p.inv_v_scale);
    }
    *reinterpret_cast<Pack8<CacheT>*>(static_cast<CacheT*>(p.k_cache) + dst) = ko;
    *reinterpret_cast<Pack8<CacheT>*>(static_cast<CacheT*>(p.v_cache) + dst) = vo;
  }
}

template <typename T, typename CacheT>
void launch(const CacheWriteParams& p, bool vec8, int num_slots, cudaStream_t stream) {
  if (vec8) {
    const std::int64_t items =
        static_cast<std::int64_t>(num_slots) * (p.num_kv_heads * p.head_size / 8);
    const std::int64_t per_cta = kVec8Threads * kVec8Items;
    const auto ctas = static_cast<unsigned>((items + per_cta - 1) / per_cta);
    reshape_and_cache_vec8_kernel<T, CacheT><<<ctas, kVec8Threads, 0, stream>>>(p, num_slots);
  } else {
    reshape_and_cache_kernel<T, CacheT><<<num_slots, 128, 0, stream>>>(p);
  }
  FF_CHECK_LAUNCH();
}

/// Whether every 8-element group of a row starts 16-byte aligned in the input (and aligned to
/// 8 cache elements in the cache), so the vectorised kernel may run.
bool aligned_for_vec8(const CacheWriteParams& p, std::size_t cache_elem) {
  auto multiple = [](std::int64_t x, std::int64_t m) { return x % m == 0; };
  const auto addr = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); };
  return p.head_size % 8 == 0 && addr(p.key) % 16 == 0 && addr(p.value) % 16 == 0 &&
         multiple(p.key_stride_token, 8) && multiple(p.key_stride_head, 8) &&
         multiple(p.value_stride_token, 8) && multiple(p.value_stride_head, 8) &&
         addr(p.k_cache) % (8 * cache_elem) == 0 && addr(p.v_cache) % (8 * cache_elem) == 0 &&
         multiple(p.stride_block, 8) && multiple(p.stride_token, 8) && multiple(p.stride_head, 8);
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
  // The vectorised kernel's 32-bit indices: the step's items and the cache's slots fit.
  constexpr std::int64_t kIndexLimit = std::int64_t(1) << 32;
  const bool indices_fit =
      std::int64_t(num_slots) * p.num_kv_heads * p.head_size / 8 + kVec8Threads * kVec8Items <
          kIndexLimit &&
      k_cache.size(0) * k_cache.size(1) < kIndexLimit;
  const bool vec8 = indices_fit && aligned_for_vec8(p, size_of(cache));
  if (in == DType::kBF16 && cache == DType::kBF16)
    return launch<__nv_bfloat16, __nv_bfloat16>(p, vec8, num_slots, stream);
  if (in == DType::kF16 && cache == DType::kF16)
    return launch<__half, __half>(p, vec8, num_slots, stream);
  if (in == DType::kBF16 && cache == DType::kFp8E4M3)
    return launch<__nv_bfloat16, __nv_fp8_e4m3>(p, vec8, num_slots, stream);
  if (in == DType::kF16 && cache == DType::kFp8E4M3)
    return launch<__half, __nv_fp8_e4m3>(p, vec8, num_slots, stream);
  FF_THROW(ErrorCode::kUnsupported, "cache write from ", name_of(in), " into a ", name_of(cache),
           " cache is not supported");
}

}  // namespace freezeframe::kernels
