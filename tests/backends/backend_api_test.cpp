// The backend abstraction on the host: registry, capabilities, KV-cache layout, and the
// argument checks that must reject bad input before anything reaches the device.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <span>

#include "freezeframe/backends/backend.h"
#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"

namespace freezeframe {
namespace {

AttentionParams llama_like() {
  AttentionParams p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_size = 128;
  p.scale = 1.0f / std::sqrt(128.0f);
  p.kv_cache_dtype = DType::kBF16;
  return p;
}

/// The error `fn` throws (fails the test when it throws none).
template <typename Fn>
Error error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a freezeframe::Error";
  return Error(ErrorCode::kInternal, "none thrown", __FILE__, __LINE__);
}

TEST(Registry, FindsBuiltinsAndListsThemForUnknownNames) {
  const auto names = BackendRegistry::global().names();
  EXPECT_EQ(names, (std::vector<std::string>{"mla", "paged", "reference", "reference_mla"}));
  EXPECT_EQ(find_backend("reference").name(), "reference");
  // The fast backend's name before it ran prefill rows too is an alias of it.
  EXPECT_EQ(&find_backend("paged_decode"), &find_backend("paged"));
  EXPECT_EQ(BackendRegistry::global().aliases(),
            (std::vector<std::pair<std::string, std::string>>{{"paged_decode", "paged"}}));
  const Error e = error_of([] { (void)find_backend("flash_attn"); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(e.message().find("'flash_attn'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("mla, paged, reference, reference_mla"), std::string::npos)
      << e.message();
  // A name from a spec or a flag is quoted escaped.
  const Error escaped = error_of([] { (void)find_backend("\x1b[31mred"); });
  EXPECT_NE(escaped.message().find("'\\x1B[31mred'"), std::string::npos) << escaped.message();
}

/// A backend that only names itself (nothing here runs it).
class NamedOnly final : public AttentionBackend {
 public:
  std::string_view name() const override { return "reference"; }
  bool is_mla() const override { return false; }
  std::unique_ptr<AttentionImpl> make_impl(const AttentionParams&, DcpGroup) const override {
    return nullptr;
  }
  GraphSupport graph_support() const override { return GraphSupport::kNever; }
  std::vector<std::int64_t> kv_cache_shape(std::int64_t, int, int, int, DType) const override {
    return {};
  }
  std::vector<int> kv_cache_stride_order() const override { return {}; }
  bool accept_output_buffer() const override { return true; }
  bool supports_quant_query_input() const override { return false; }
  std::span<const int> supported_head_sizes() const override { return {}; }
  std::span<const DType> supported_kv_cache_dtypes() const override { return {}; }
};

TEST(Registry, AliasesNameRegisteredBackendsOnly) {
  BackendRegistry registry;
  registry.add(std::make_unique<NamedOnly>());
  registry.add_alias("simple", "reference");
  EXPECT_EQ(registry.get("simple").name(), "reference");
  EXPECT_TRUE(registry.contains("simple"));
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"reference"}));
  const Error unknown = error_of([&] { registry.add_alias("fast", "nothing"); });
  EXPECT_NE(unknown.message().find("cannot make 'fast' an alias of 'nothing'"), std::string::npos)
      << unknown.message();
  const Error taken = error_of([&] { registry.add_alias("reference", "reference"); });
  EXPECT_NE(taken.message().find("a backend named 'reference' is already registered"),
            std::string::npos)
      << taken.message();
}

TEST(Registry, RejectsDuplicateNames) {
  BackendRegistry registry;
  struct Named : AttentionBackend {
    std::string_view name() const override { return "reference"; }
    bool is_mla() const override { return false; }
    GraphSupport graph_support() const override { return GraphSupport::kNever; }
    std::vector<std::int64_t> kv_cache_shape(std::int64_t, int, int, int, DType) const override {
      return {};
    }
    std::vector<int> kv_cache_stride_order() const override { return {}; }
    bool accept_output_buffer() const override { return false; }
    bool supports_quant_query_input() const override { return false; }
    std::span<const int> supported_head_sizes() const override { return {}; }
    std::span<const DType> supported_kv_cache_dtypes() const override { return {}; }
  };
  registry.add(std::make_unique<Named>());
  EXPECT_THROW(registry.add(std::make_unique<Named>()), Error);
  EXPECT_TRUE(registry.contains("reference"));
}

TEST(ReferenceBackend, DeclaresItsCapabilities) {
  const AttentionBackend& b = find_backend("reference");
  EXPECT_FALSE(b.is_mla());
  EXPECT_TRUE(b.accept_output_buffer());
  EXPECT_FALSE(b.supports_quant_query_input());
  EXPECT_EQ(b.graph_support(), GraphSupport::kAlways);
  EXPECT_TRUE(b.supports_head_size(64) && b.supports_head_size(128) && b.supports_head_size(256));
  EXPECT_FALSE(b.supports_head_size(72));
  EXPECT_TRUE(b.supports_kv_cache_dtype(DType::kFp8E4M3));
  EXPECT_FALSE(b.supports_kv_cache_dtype(DType::kFp8E5M2));
  auto builder_support = find_backend("reference_mla").graph_support();
  EXPECT_EQ(builder_support, GraphSupport::kUniformSingleTokenDecode);
}

TEST(ReferenceBackend, KvCacheShapeStrideOrderAndBytes) {
  const AttentionBackend& b = find_backend("reference");
  EXPECT_EQ(b.kv_cache_shape(100, 16, 8, 128, DType::kBF16),
            (std::vector<std::int64_t>{2, 100, 16, 8, 128}));
  EXPECT_EQ(kv_cache_bytes(b, 100, 16, 8, 128, DType::kBF16), 2LL * 100 * 16 * 8 * 128 * 2);
  EXPECT_EQ(kv_cache_bytes(b, 100, 16, 8, 128, DType::kFp8E4M3), 2LL * 100 * 16 * 8 * 128);
  const TensorView v = kv_cache_view(b, reinterpret_cast<void*>(0x1000), Device::cuda(), 100, 16, 8,
                                     128, DType::kBF16);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.stride(1), 16 * 8 * 128);
  const AttentionBackend& mla = find_backend("reference_mla");
  EXPECT_EQ(mla.kv_cache_shape(10, 64, 1, 576, DType::kBF16),
            (std::vector<std::int64_t>{10, 64, 576}));
  EXPECT_THROW((void)mla.kv_cache_shape(10, 64, 2, 576, DType::kBF16), Error);
}

TEST(ReferenceBackend, LseForDecodeFollowsTheDcpGroup) {
  const AttentionBackend& b = find_backend("reference");
  auto single = b.make_impl(llama_like());
  EXPECT_TRUE(single->can_return_lse_for_decode());
  EXPECT_FALSE(single->need_to_return_lse_for_decode());
  EXPECT_EQ(single->dcp_world_size(), 1);
  auto sharded = b.make_impl(llama_like(), DcpGroup{.world_size = 4, .rank = 3});
  EXPECT_TRUE(sharded->need_to_return_lse_for_decode());
  EXPECT_EQ(sharded->dcp_rank(), 3);
  EXPECT_FALSE(sharded->fused_output_quant_supported(QuantKey{}));
  EXPECT_THROW((void)b.make_impl(llama_like(), DcpGroup{.world_size = 2, .rank = 2}), Error);
}

TEST(ReferenceBackend, MakeImplRejectsBadParameters) {
  const AttentionBackend& b = find_backend("reference");
  struct Case {
    const char* what;
    void (*mutate)(AttentionParams&);
    ErrorCode code;
    const char* needle;
  };
  const Case cases[] = {
      {"head size", [](AttentionParams& p) { p.head_size = 72; }, ErrorCode::kUnsupported,
       "head_size 72"},
      {"head ratio", [](AttentionParams& p) { p.num_kv_heads = 5; }, ErrorCode::kInvalidArgument,
       "multiple of num_kv_heads"},
      {"no heads", [](AttentionParams& p) { p.num_heads = 0; }, ErrorCode::kInvalidArgument,
       "num_heads"},
      {"cache dtype", [](AttentionParams& p) { p.kv_cache_dtype = DType::kI32; },
       ErrorCode::kUnsupported, "kv_cache_dtype i32"},
      {"alibi count",
       [](AttentionParams& p) {
         p.alibi_slopes = {1.0f, 2.0f};
       },
       ErrorCode::kInvalidArgument, "alibi_slopes"},
      {"window", [](AttentionParams& p) { p.sliding_window = 0; }, ErrorCode::kInvalidArgument,
       "sliding_window"},
      {"soft cap", [](AttentionParams& p) { p.logits_soft_cap = -1.0f; },
       ErrorCode::kInvalidArgument, "logits_soft_cap"},
      {"scale", [](AttentionParams& p) { p.scale = NAN; }, ErrorCode::kInvalidArgument, "scale"},
      {"cross + alibi",
       [](AttentionParams& p) {
         p.attn_type = AttentionType::kEncoderDecoder;
         p.alibi_slopes.assign(32, 0.5f);
       },
       ErrorCode::kUnsupported, "encoder_decoder"},
  };
  for (const Case& c : cases) {
    AttentionParams p = llama_like();
    c.mutate(p);
    const Error e = error_of([&] { (void)b.make_impl(p); });
    EXPECT_EQ(e.code(), c.code) << c.what << ": " << e.what();
    EXPECT_NE(e.message().find(c.needle), std::string::npos) << c.what << ": " << e.message();
  }
  const Error mla = error_of([&] { (void)b.make_mla_impl(MlaParams{}, MlaWeights{}); });
  EXPECT_EQ(mla.code(), ErrorCode::kUnsupported);
}

// Forward arguments are checked before any launch: fake device pointers are never touched.
class ForwardValidation : public ::testing::Test {
 protected:
  static void* fake(std::uintptr_t at) { return reinterpret_cast<void*>(at); }
  void SetUp() override {
    impl = find_backend("reference").make_impl(llama_like());
    md.num_tokens = 4;
    md.num_reqs = 1;
    md.num_slots = 4;
    query = TensorView(fake(0x1000), DType::kBF16, {4, 32, 128}, Device::cuda());
    key = TensorView(fake(0x2000), DType::kBF16, {4, 8, 128}, Device::cuda());
    value = key;
    cache = TensorView(fake(0x3000), DType::kBF16, {2, 10, 16, 8, 128}, Device::cuda());
    output = TensorView(fake(0x4000), DType::kBF16, {4, 32 * 128}, Device::cuda());
  }
  Error forward_error() {
    return error_of(
        [&] { impl->forward(layer, query, key, value, cache, md, output, nullptr, lse, quant); });
  }
  std::unique_ptr<AttentionImpl> impl;
  AttentionLayer layer;
  AttentionMetadata md;
  TensorView query, key, value, cache, output, lse;
  OutputQuant quant;
};

TEST_F(ForwardValidation, RejectsWrongQueryDtype) {
  query = TensorView(fake(0x1000), DType::kF32, {4, 32, 128}, Device::cuda());
  EXPECT_NE(forward_error().message().find("query must be bf16 or f16"), std::string::npos);
}
TEST_F(ForwardValidation, RejectsMismatchedQueryShape) {
  query = TensorView(fake(0x1000), DType::kBF16, {4, 16, 128}, Device::cuda());
  EXPECT_NE(forward_error().message().find("query has shape bf16[4, 16, 128]"), std::string::npos);
}
TEST_F(ForwardValidation, RejectsOutputOfOtherSize) {
  output = TensorView(fake(0x4000), DType::kBF16, {4, 31 * 128}, Device::cuda());
  EXPECT_NE(forward_error().message().find("output has shape"), std::string::npos);
}
TEST_F(ForwardValidation, RejectsHostOutput) {
  output = TensorView(fake(0x4000), DType::kBF16, {4, 32, 128}, Device::cpu());
  EXPECT_NE(forward_error().message().find("device memory"), std::string::npos);
}
TEST_F(ForwardValidation, RejectsKeyWithOtherHeadCount) {
  key = TensorView(fake(0x2000), DType::kBF16, {4, 4, 128}, Device::cuda());
  EXPECT_NE(forward_error().message().find("key has shape"), std::string::npos);
}
TEST_F(ForwardValidation, RejectsCacheOfOtherDtype) {
  cache = TensorView(fake(0x3000), DType::kF16, {2, 10, 16, 8, 128}, Device::cuda());
  EXPECT_NE(forward_error().message().find("kv_cache is f16"), std::string::npos);
}
TEST_F(ForwardValidation, RejectsLseOfWrongShape) {
  lse = TensorView(fake(0x5000), DType::kF32, {4, 8}, Device::cuda());
  EXPECT_NE(forward_error().message().find("lse_ln has shape"), std::string::npos);
}
TEST_F(ForwardValidation, RejectsFusedOutputQuantisation) {
  quant.output_scale = TensorView(fake(0x6000), DType::kF32, {1}, Device::cuda());
  EXPECT_EQ(forward_error().code(), ErrorCode::kUnsupported);
}
TEST_F(ForwardValidation, RejectsDecoderWithoutNewKeys) {
  key = value = TensorView();
  EXPECT_NE(forward_error().message().find("needs this step's key and value"), std::string::npos);
}

TEST(PagedDecodeBackend, DeclaresAHeadMajorCacheAndDecoderOnly) {
  const AttentionBackend& b = find_backend("paged_decode");
  EXPECT_EQ(b.graph_support(), GraphSupport::kAlways);
  EXPECT_EQ(b.kv_cache_stride_order(), (std::vector<int>{0, 1, 3, 2, 4}));
  const TensorView v = kv_cache_view(b, reinterpret_cast<void*>(0x1000), Device::cuda(), 10, 16, 8,
                                     128, DType::kBF16);
  EXPECT_EQ(v.stride(2), 128) << "tokens of one head are adjacent";
  EXPECT_EQ(v.stride(3), 16 * 128) << "heads are a block's outer dimension";
  AttentionParams p = llama_like();
  EXPECT_NO_THROW((void)b.make_impl(p));
  p.head_size = 96;
  EXPECT_EQ(error_of([&] { (void)b.make_impl(p); }).code(), ErrorCode::kUnsupported);
  // Every attention type: encoders on the prefill kernel, cross-attention over the cache.
  for (AttentionType type :
       {AttentionType::kEncoder, AttentionType::kEncoderOnly, AttentionType::kEncoderDecoder}) {
    p = llama_like();
    p.attn_type = type;
    EXPECT_NO_THROW((void)b.make_impl(p)) << to_string(type);
  }
  p.alibi_slopes.assign(p.num_heads, 0.5f);
  EXPECT_NE(error_of([&] { (void)b.make_impl(p); }).message().find("cross"), std::string::npos);
  // The prefill kernel's tile schedule is staged with every step.
  const BatchLimits limits{.max_num_reqs = 8, .max_num_tokens = 512};
  EXPECT_GT(b.plan_bytes(limits, DeviceProperties::h200()), 0u);
}

// Under decode context parallelism both dense backends attend prefill rows over a shard; their
// impls refuse what needs a key's position (a window, ALiBi), and the metadata check takes a
// shard shorter than the new tokens (even empty) but not one longer than the whole sequence.
TEST(PagedDecodeBackend, AttendsPrefillRowsOverADcpShard) {
  for (const char* name : {"paged_decode", "reference"}) {
    SCOPED_TRACE(name);
    const AttentionBackend& b = find_backend(name);
    EXPECT_TRUE(b.supports_dcp_prefill());
    AttentionParams p = llama_like();
    const DcpGroup dcp{.world_size = 2, .rank = 1, .interleave_size = 16};
    EXPECT_NO_THROW((void)b.make_impl(p, dcp));
    p.sliding_window = 64;
    EXPECT_EQ(error_of([&] { (void)b.make_impl(p, dcp); }).code(), ErrorCode::kUnsupported);
    EXPECT_NO_THROW((void)b.make_impl(p)) << "a window without DCP";
    p = llama_like();
    p.alibi_slopes.assign(p.num_heads, 0.5f);
    EXPECT_EQ(error_of([&] { (void)b.make_impl(p, dcp); }).code(), ErrorCode::kUnsupported);
    EXPECT_EQ(error_of([&] {
                (void)b.make_impl(llama_like(), DcpGroup{2, 1, 0});
              }).code(),
              ErrorCode::kInvalidArgument);
  }

  // A decode of a sequence of 1 (the shard empty) and 20 new tokens after 33 (15 held).
  const std::vector<std::int32_t> qsl = {0, 1, 21}, table = {0, 1, 2, 3};
  std::vector<std::int32_t> seq = {0, 15}, context = {0, 33};
  CommonAttentionMetadata c;
  c.query_start_loc = qsl;
  c.seq_lens = seq;
  c.block_table = table;
  c.block_table_stride = 2;
  c.num_tokens = 21;
  c.num_decodes = 1;
  c.dcp_context_lens = context;
  const BatchLimits limits{
      .max_num_reqs = 2, .max_num_tokens = 32, .max_blocks_per_req = 2, .block_size = 16};
  EXPECT_NO_THROW(validate_metadata(c, limits));
  seq[1] = 54;  // more keys than the 53 positions of the sequence
  EXPECT_NE(error_of([&] { validate_metadata(c, limits); }).message().find("a shard of 54 keys"),
            std::string::npos);
  seq[1] = 15;
  c.dcp_context_lens = {};  // without DCP the empty decode's seq_len is short of its token
  EXPECT_EQ(error_of([&] { validate_metadata(c, limits); }).code(), ErrorCode::kInvalidArgument);

  // The reference backend's plan: each request's first new position, from the context lengths
  // under DCP, else from its keys.
  const AttentionBackend& reference = find_backend("reference");
  ASSERT_EQ(reference.plan_bytes(limits, DeviceProperties::h200()), 2 * sizeof(std::int32_t));
  std::int32_t positions[2] = {-7, -7};
  c.dcp_context_lens = context;
  reference.plan(c, std::as_writable_bytes(std::span(positions)));
  EXPECT_EQ(positions[0], 0);
  EXPECT_EQ(positions[1], 33);
  c.dcp_context_lens = {};
  seq = {4, 30};
  reference.plan(c, std::as_writable_bytes(std::span(positions)));
  EXPECT_EQ(positions[0], 3);
  EXPECT_EQ(positions[1], 10);
}

/// DeepSeek-V2's attention (its query through a latent of 1536) over `heads` heads, and
/// weights of those shapes at made-up device addresses (nothing runs them).
std::pair<MlaParams, MlaWeights> deepseek_v2_attention(int heads) {
  MlaParams p;
  p.num_heads = heads;
  p.q_lora_rank = 1536;
  p.kv_lora_rank = 512;
  p.qk_nope_head_dim = 128;
  p.qk_rope_head_dim = 64;
  p.v_head_dim = 128;
  p.scale = 0.07f;
  MlaWeights w;
  w.q_proj = TensorView(reinterpret_cast<void*>(0x1000), DType::kBF16, {heads * 192, 1536},
                        Device::cuda());
  w.kv_b_proj =
      TensorView(reinterpret_cast<void*>(0x2000), DType::kBF16, {heads * 256, 512}, Device::cuda());
  return {p, w};
}

TEST(ReferenceMlaBackend, RejectsBadParametersAndWeights) {
  const AttentionBackend& b = find_backend("reference_mla");
  const auto [p, w] = deepseek_v2_attention(16);
  EXPECT_NO_THROW((void)b.make_mla_impl(p, w));
  MlaParams bad_rank = p;
  bad_rank.kv_lora_rank = 300;
  EXPECT_NE(
      error_of([&] { (void)b.make_mla_impl(bad_rank, w); }).message().find("kv_lora_rank 300"),
      std::string::npos);
  MlaWeights bad_w = w;
  bad_w.kv_b_proj =
      TensorView(reinterpret_cast<void*>(0x2000), DType::kBF16, {16 * 255, 512}, Device::cuda());
  EXPECT_NE(
      error_of([&] { (void)b.make_mla_impl(p, bad_w); }).message().find("kv_b_proj has shape"),
      std::string::npos);
  EXPECT_EQ(error_of([&] { (void)b.make_impl(AttentionParams{}); }).code(),
            ErrorCode::kUnsupported);
}

TEST(MlaBackend, DecodesDeepSeeksLatentOnlyAndSaysWhereOthersGo) {
  const AttentionBackend& b = find_backend("mla");
  EXPECT_TRUE(b.is_mla());
  EXPECT_EQ(std::vector<int>(b.supported_head_sizes().begin(), b.supported_head_sizes().end()),
            std::vector<int>{576});
  auto [p, w] = deepseek_v2_attention(128);
  EXPECT_NO_THROW((void)b.make_mla_impl(p, w));
  MlaParams small = p;
  small.kv_lora_rank = 256;
  w.kv_b_proj =
      TensorView(reinterpret_cast<void*>(0x2000), DType::kBF16, {128 * 256, 256}, Device::cuda());
  const Error e = error_of([&] { (void)b.make_mla_impl(small, w); });
  EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  EXPECT_NE(e.message().find("kv_lora_rank 256"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("'reference_mla'"), std::string::npos) << e.message();
  // It expands no latent (every row absorbed), and holds a split-KV scratch: one row of
  // DeepSeek-V2's 128 heads over a 32k-position table may split 64 ways (f32 partial outputs
  // and LSEs).
  BatchLimits limits{
      .max_num_reqs = 1, .max_num_tokens = 1, .max_blocks_per_req = 512, .block_size = 64};
  const DeviceProperties h200 = DeviceProperties::h200();
  const std::size_t reference = find_backend("reference_mla").mla_workspace_bytes(p, limits, h200);
  const std::size_t fast = b.mla_workspace_bytes(p, limits, h200);
  EXPECT_GE(fast, std::size_t(64) * 128 * (512 + 1) * sizeof(float));
  EXPECT_LT(fast, reference) << "the reference expands 32k positions × 128 heads";
}

}  // namespace
}  // namespace freezeframe
