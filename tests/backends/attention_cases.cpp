// The cases of attention_gpu_test.cpp.

#include "backends/attention_cases.h"

#include <deque>
#include <string>
#include <string_view>

namespace freezeframe::attention_testing {
namespace {

/// Names of generated cases, alive as long as the test program.
std::deque<std::string>& names() {
  static std::deque<std::string> storage;
  return storage;
}

}  // namespace

std::vector<Case> attention_cases() {
  std::vector<Case> out;
  out.push_back({.name = "bf16_gqa4_d128"});
  out.push_back({.name = "f16_gqa4_d128",
                 .dtype = DType::kF16,
                 .cache_dtype = DType::kF16,
                 .tolerance = 5e-3});
  out.push_back({.name = "bf16_gqa8_d64_block32",
                 .heads = 16,
                 .kv_heads = 2,
                 .head_size = 64,
                 .block_size = 32});
  out.push_back({.name = "bf16_mqa_d256", .heads = 8, .kv_heads = 1, .head_size = 256});
  out.push_back({.name = "bf16_mha_d128_block64", .heads = 4, .kv_heads = 4, .block_size = 64});
  out.push_back({.name = "bf16_fp8_cache", .cache_dtype = DType::kFp8E4M3});
  out.push_back({.name = "f16_fp8_cache_d64",
                 .dtype = DType::kF16,
                 .cache_dtype = DType::kFp8E4M3,
                 .head_size = 64,
                 .tolerance = 5e-3});
  out.push_back({.name = "bf16_sliding_window", .sliding_window = 24});
  out.push_back({.name = "bf16_alibi", .alibi = true});
  out.push_back({.name = "bf16_softcap", .softcap = 5.0f});
  out.push_back({.name = "bf16_all_features_gqa8",
                 .heads = 16,
                 .kv_heads = 2,
                 .sliding_window = 40,
                 .alibi = true,
                 .softcap = 30.0f});
  out.push_back({.name = "bf16_padding_rows", .padding_rows = 5});
  out.push_back({.name = "bf16_head_major_cache", .head_major_cache = true});
  out.push_back({.name = "bf16_decode_only_long", .decodes = {1, 300, 1000, 129}, .prefills = {}});
  out.push_back({.name = "bf16_prefill_only", .decodes = {}, .prefills = {{200, 200}, {75, 3}}});
  out.push_back({.name = "bf16_encoder", .type = AttentionType::kEncoder});
  out.push_back({.name = "f16_encoder_only_window",
                 .dtype = DType::kF16,
                 .cache_dtype = DType::kF16,
                 .sliding_window = 8,
                 .type = AttentionType::kEncoderOnly,
                 .tolerance = 5e-3});
  out.push_back(
      {.name = "bf16_encoder_only_alibi", .alibi = true, .type = AttentionType::kEncoderOnly});

  // The paged backend: decode rows through the split-KV kernel, other rows through the
  // tensor-core prefill kernel.
  const char* pd = "paged";
  const std::vector<int> long_decodes = {1, 16, 17, 300, 1000, 4096};  // length 1 and a long one
  out.push_back({.name = "decode_bf16_gqa4_d128", .backend = pd});
  out.push_back({.name = "decode_f16_gqa4_d128",
                 .backend = pd,
                 .dtype = DType::kF16,
                 .cache_dtype = DType::kF16,
                 .tolerance = 5e-3});
  out.push_back({.name = "decode_bf16_long_mixed_lengths",
                 .backend = pd,
                 .heads = 32,
                 .kv_heads = 8,
                 .decodes = long_decodes,
                 .prefills = {}});
  out.push_back({.name = "decode_bf16_one_split",
                 .backend = pd,
                 .heads = 32,
                 .kv_heads = 8,
                 .decodes = std::vector<int>(40, 333),
                 .prefills = {{30, 7}}});
  out.push_back({.name = "decode_bf16_d64_block32_gqa16",
                 .backend = pd,
                 .heads = 32,
                 .kv_heads = 2,
                 .head_size = 64,
                 .block_size = 32,
                 .decodes = long_decodes});
  out.push_back({.name = "decode_bf16_d256_block64_mha",
                 .backend = pd,
                 .heads = 4,
                 .kv_heads = 4,
                 .head_size = 256,
                 .block_size = 64,
                 .decodes = long_decodes});
  out.push_back({.name = "decode_bf16_mqa",
                 .backend = pd,
                 .heads = 16,
                 .kv_heads = 1,
                 .decodes = long_decodes});
  out.push_back(
      {.name = "decode_bf16_gqa3", .backend = pd, .heads = 12, .kv_heads = 4, .head_size = 64});
  out.push_back({.name = "decode_bf16_gqa2_d256",
                 .backend = pd,
                 .heads = 8,
                 .kv_heads = 4,
                 .head_size = 256});
  out.push_back({.name = "decode_bf16_fp8",
                 .backend = pd,
                 .cache_dtype = DType::kFp8E4M3,
                 .heads = 32,
                 .kv_heads = 8,
                 .decodes = long_decodes});
  out.push_back({.name = "decode_f16_fp8_d64_gqa8",
                 .backend = pd,
                 .dtype = DType::kF16,
                 .cache_dtype = DType::kFp8E4M3,
                 .heads = 16,
                 .kv_heads = 2,
                 .head_size = 64,
                 .tolerance = 5e-3});
  out.push_back({.name = "decode_bf16_fp8_d256_block32",
                 .backend = pd,
                 .cache_dtype = DType::kFp8E4M3,
                 .head_size = 256,
                 .block_size = 32});
  out.push_back({.name = "decode_bf16_sliding_window",
                 .backend = pd,
                 .decodes = long_decodes,
                 .sliding_window = 100});
  out.push_back(
      {.name = "decode_bf16_alibi", .backend = pd, .decodes = long_decodes, .alibi = true});
  out.push_back({.name = "decode_bf16_softcap", .backend = pd, .softcap = 5.0f});
  out.push_back({.name = "decode_bf16_all_features",
                 .backend = pd,
                 .heads = 16,
                 .kv_heads = 2,
                 .decodes = long_decodes,
                 .sliding_window = 700,
                 .alibi = true,
                 .softcap = 30.0f});
  out.push_back({.name = "decode_bf16_padding_rows", .backend = pd, .padding_rows = 5});
  out.push_back(
      {.name = "decode_bf16_decode_only", .backend = pd, .decodes = {5, 2000, 77}, .prefills = {}});

  // Prefill rows of the paged decode backend: the tensor-core prefill kernel. Lengths 1, 17,
  // 1000 and 4097, chunks over a cached prefix, mixed with decodes, every feature, head
  // packing from 1 (MHA, groups of 3) to 16 query heads per KV head.
  out.push_back({.name = "prefill_bf16_mixed_lengths",
                 .backend = pd,
                 .decodes = {1, 40},
                 .prefills = {{1000, 1000}, {1017, 17}, {300, 2}, {129, 128}, {64, 64}}});
  out.push_back({.name = "prefill_bf16_4097_d64",
                 .backend = pd,
                 .heads = 2,
                 .kv_heads = 1,
                 .head_size = 64,
                 .decodes = {},
                 .prefills = {{4097, 4097}}});
  out.push_back({.name = "prefill_bf16_chunk_over_long_prefix",
                 .backend = pd,
                 .heads = 4,
                 .kv_heads = 1,
                 .decodes = {4096},
                 .prefills = {{4500, 200}}});
  out.push_back({.name = "prefill_f16_gqa4",
                 .backend = pd,
                 .dtype = DType::kF16,
                 .cache_dtype = DType::kF16,
                 .prefills = {{700, 333}, {90, 90}},
                 .tolerance = 5e-3});
  out.push_back({.name = "prefill_bf16_fp8_gqa8",
                 .backend = pd,
                 .cache_dtype = DType::kFp8E4M3,
                 .heads = 16,
                 .kv_heads = 2,
                 .prefills = {{600, 600}, {250, 31}}});
  out.push_back({.name = "prefill_f16_fp8_d64",
                 .backend = pd,
                 .dtype = DType::kF16,
                 .cache_dtype = DType::kFp8E4M3,
                 .head_size = 64,
                 .prefills = {{700, 300}},
                 .tolerance = 5e-3});
  out.push_back({.name = "prefill_bf16_fp8_d256",
                 .backend = pd,
                 .cache_dtype = DType::kFp8E4M3,
                 .heads = 4,
                 .kv_heads = 2,
                 .head_size = 256,
                 .prefills = {{400, 150}}});
  out.push_back({.name = "prefill_bf16_d256_mha_block64",
                 .backend = pd,
                 .heads = 4,
                 .kv_heads = 4,
                 .head_size = 256,
                 .block_size = 64,
                 .prefills = {{500, 300}, {77, 77}}});
  // Head size 256 over 16-token blocks: the Hopper kernel's instantiation without the overlap.
  out.push_back({.name = "prefill_bf16_d256_gqa4",
                 .backend = pd,
                 .heads = 8,
                 .kv_heads = 2,
                 .head_size = 256,
                 .prefills = {{700, 330}, {129, 129}}});
  out.push_back({.name = "prefill_bf16_gqa3_d64",
                 .backend = pd,
                 .heads = 12,
                 .kv_heads = 4,
                 .head_size = 64,
                 .prefills = {{300, 300}, {45, 2}}});
  out.push_back({.name = "prefill_bf16_gqa32",
                 .backend = pd,
                 .heads = 32,
                 .kv_heads = 1,
                 .head_size = 64,
                 .prefills = {{333, 333}}});
  out.push_back({.name = "prefill_bf16_sliding_window",
                 .backend = pd,
                 .prefills = {{1000, 1000}, {900, 250}},
                 .sliding_window = 64});
  out.push_back(
      {.name = "prefill_bf16_alibi", .backend = pd, .prefills = {{500, 300}}, .alibi = true});
  out.push_back(
      {.name = "prefill_bf16_softcap", .backend = pd, .prefills = {{500, 300}}, .softcap = 5.0f});
  out.push_back({.name = "prefill_bf16_all_features",
                 .backend = pd,
                 .heads = 16,
                 .kv_heads = 2,
                 .decodes = {700, 3},
                 .prefills = {{1500, 700}, {20, 20}},
                 .sliding_window = 300,
                 .alibi = true,
                 .softcap = 30.0f});
  // Pages of 64 tokens and more: the Hopper kernel overlaps a tile's softmax with the last
  // tile's P·V there (smaller pages take the kernel without the overlap).
  out.push_back({.name = "prefill_bf16_block128_mixed_lengths",
                 .backend = pd,
                 .block_size = 128,
                 .decodes = {1, 40},
                 .prefills = {{1000, 1000}, {1017, 17}, {300, 2}, {129, 128}, {4097, 4097}}});
  out.push_back({.name = "prefill_bf16_block64_all_features",
                 .backend = pd,
                 .heads = 16,
                 .kv_heads = 2,
                 .block_size = 64,
                 .decodes = {700, 3},
                 .prefills = {{1500, 700}, {20, 20}, {333, 333}},
                 .sliding_window = 300,
                 .alibi = true,
                 .softcap = 30.0f});
  out.push_back({.name = "prefill_bf16_padding_rows",
                 .backend = pd,
                 .prefills = {{200, 150}},
                 .padding_rows = 7});
  out.push_back({.name = "prefill_bf16_head_major_block32",
                 .backend = pd,
                 .block_size = 32,
                 .prefills = {{260, 260}},
                 .head_major_cache = true});
  // Encoder self-attention on the prefill kernel: bidirectional over the step's own rows,
  // single-token requests included.
  out.push_back({.name = "prefill_bf16_encoder",
                 .backend = pd,
                 .prefills = {{300, 300}, {1, 1}, {77, 77}},
                 .type = AttentionType::kEncoder});
  out.push_back({.name = "prefill_f16_encoder_only_window",
                 .backend = pd,
                 .dtype = DType::kF16,
                 .cache_dtype = DType::kF16,
                 .prefills = {{500, 500}, {64, 64}},
                 .sliding_window = 40,
                 .type = AttentionType::kEncoderOnly,
                 .tolerance = 5e-3});
  out.push_back({.name = "prefill_bf16_encoder_only_alibi_softcap_gqa8",
                 .backend = pd,
                 .heads = 16,
                 .kv_heads = 2,
                 .head_size = 64,
                 .prefills = {{257, 257}},
                 .alibi = true,
                 .softcap = 20.0f,
                 .type = AttentionType::kEncoderOnly});

  // Both prefill kernel generations run every prefill case: the Hopper kernel (wgmma, TMA)
  // where it applies (16-bit caches), and the portable mma.sync kernel everywhere.
  const std::size_t all = out.size();
  for (std::size_t i = 0; i < all; ++i) {
    if (std::string_view(out[i].name).substr(0, 8) != "prefill_") continue;
    if (!is_fp8(out[i].cache_dtype)) {
      Case sm90 = out[i];
      sm90.prefill_kernel = "sm90";
      names().push_back(std::string(out[i].name) + "_sm90");
      sm90.name = names().back().c_str();
      out.push_back(sm90);
    }
    out[i].prefill_kernel = "mma_sync";
  }
  return out;
}

}  // namespace freezeframe::attention_testing
