// The cache write against the host one: random key/value rows (contiguous, or the K and V
// slices of a fused QKV row as the model hands them) to random distinct slots with padding
// (slot −1) mixed in, into a cache poisoned with 0xFF bytes; 16-bit caches must hold exactly
// the input, fp8 caches the input over its scale within fp8's rounding, and every slot not
// written must keep its poison. Token counts cover one item, partial CTAs and many CTAs; a head
// size that is not a multiple of 8 takes the element-wise kernel.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "freezeframe/backends/host_reference.h"
#include "freezeframe/core/cuda_check.h"
#include "kernels/cache_write.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

using testing::download;
using testing::upload;

struct WriteCase {
  const char* name;
  DType in, cache;
  int tokens, kv_heads, head_size;
  bool fused;  ///< K and V are slices of a [tokens, heads + 2 · kv_heads, D] row
};

std::ostream& operator<<(std::ostream& os, const WriteCase& c) { return os << c.name; }

class CacheWrite : public ::testing::TestWithParam<WriteCase> {};

TEST_P(CacheWrite, MatchesHostWriteAndLeavesOtherSlotsAlone) {
  FF_REQUIRE_GPU();
  const WriteCase& c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.tokens * 131 + c.head_size));
  const int block_size = 16, heads = 4 * c.kv_heads;
  const int num_blocks = (c.tokens + block_size - 1) / block_size + 3;
  const bool fp8 = is_fp8(c.cache);
  const float k_scale = fp8 ? 0.5f : 1.0f, v_scale = fp8 ? 2.0f : 1.0f;

  // Inputs: one fused row per token, K and V as views into it (or two contiguous tensors).
  const int row = c.fused ? (heads + 2 * c.kv_heads) * c.head_size : c.kv_heads * c.head_size;
  HostTensor k_rows(c.in, {c.tokens, row}), v_rows(c.in, {c.tokens, row});
  testing::fill_normal(k_rows, rng);
  testing::fill_normal(v_rows, rng);
  if (c.fused) v_rows = k_rows;
  const std::int64_t k_offset = c.fused ? std::int64_t(heads) * c.head_size : 0;
  const std::int64_t v_offset = c.fused ? std::int64_t(heads + c.kv_heads) * c.head_size : 0;
  const std::int64_t shape[] = {c.tokens, c.kv_heads, c.head_size};
  const std::int64_t strides[] = {row, c.head_size, 1};
  auto slice = [&](void* base, std::int64_t offset) {
    return TensorView::strided(static_cast<std::byte*>(base) + offset * size_of(c.in), c.in, shape,
                               strides, Device::cpu());
  };
  auto d_k = upload(k_rows), d_v = upload(v_rows);
  auto device_slice = [&](const testing::DeviceTensor& t, std::int64_t offset) {
    return TensorView::strided(static_cast<std::byte*>(t.view.data()) + offset * size_of(c.in),
                               c.in, shape, strides, t.view.device());
  };

  // Distinct random slots; about one token in eight is padding.
  std::vector<std::int64_t> slots(static_cast<std::size_t>(num_blocks) * block_size);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<std::size_t>(c.tokens));
  std::bernoulli_distribution padding(0.125);
  for (std::int64_t& s : slots) {
    if (padding(rng)) s = -1;
  }
  HostTensor slot_tensor(DType::kI64, {c.tokens});
  std::memcpy(slot_tensor.data(), slots.data(), slots.size() * sizeof(std::int64_t));
  auto d_slots = upload(slot_tensor);

  HostTensor cache(c.cache, {2, num_blocks, block_size, c.kv_heads, c.head_size});
  cache.fill_bytes(0xFF);
  HostTensor want = cache;
  auto d_cache = upload(cache);
  kernels::launch_reshape_and_cache(device_slice(d_k, k_offset), device_slice(d_v, v_offset),
                                    d_cache.view.select(0, 0), d_cache.view.select(0, 1),
                                    d_slots.view.data_as<const std::int64_t>(), c.tokens, k_scale,
                                    v_scale, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(d_cache.view, cache);
  host_reference::reshape_and_cache(slice(k_rows.data(), k_offset), slice(v_rows.data(), v_offset),
                                    want.view(), slots, k_scale, v_scale);

  // Element by element: poison where nothing was written, the host's value where it was.
  const std::size_t elem = size_of(c.cache);
  int wrong = 0;
  for (std::int64_t i = 0; i < cache.numel() && wrong < 10; ++i) {
    const std::uint8_t* got = cache.data() + i * elem;
    const std::uint8_t* expected = want.data() + i * elem;
    const bool poison = std::all_of(expected, expected + elem, [](auto b) { return b == 0xFF; });
    if (poison || !fp8) {
      if (std::memcmp(got, expected, elem) != 0) {
        ADD_FAILURE() << "element " << i << ": " << cache.get(i) << ", expected " << want.get(i)
                      << (poison ? " (a slot not written: its poison)" : "");
        ++wrong;
      }
      continue;
    }
    // fp8: at most one step of e4m3 (3 mantissa bits) from the host's rounding.
    const float g = cache.get(i), w = want.get(i);
    if (!(std::abs(g - w) <= 0.125f * std::abs(w) + 1e-3f)) {
      ADD_FAILURE() << "element " << i << ": " << g << ", expected " << w;
      ++wrong;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CacheWrite,
    ::testing::Values(
        WriteCase{"bf16_one_token", DType::kBF16, DType::kBF16, 1, 8, 128, false},
        WriteCase{"bf16_fused_37", DType::kBF16, DType::kBF16, 37, 8, 128, true},
        WriteCase{"f16_515", DType::kF16, DType::kF16, 515, 2, 64, false},
        WriteCase{"bf16_fused_d256_300", DType::kBF16, DType::kBF16, 300, 4, 256, true},
        WriteCase{"bf16_fused_2049", DType::kBF16, DType::kBF16, 2049, 8, 128, true},
        WriteCase{"bf16_to_fp8_fused_777", DType::kBF16, DType::kFp8E4M3, 777, 8, 128, true},
        WriteCase{"f16_to_fp8_33", DType::kF16, DType::kFp8E4M3, 33, 1, 64, false},
        WriteCase{"bf16_d20_elementwise_45", DType::kBF16, DType::kBF16, 45, 3, 20, true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace freezeframe
