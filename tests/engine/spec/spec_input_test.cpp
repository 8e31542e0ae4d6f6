// engine/: specs that are wrong in ways a person rarely types but a file can hold: huge lists,
// numbers a float cannot keep, a second document, control characters, files that are not
// files; and specs read against a registry other than the global one.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {
namespace {

/// A small valid spec; tests append lines.
constexpr const char* kTiny = R"(model:
  name: tiny
  num_layers: 4
  hidden_size: 1024
  num_heads: 8
  num_kv_heads: 2
  intermediate_size: 2048
  vocab_size: 32000
  max_position_embeddings: 4096
)";

std::string message_of(const std::string& yaml) {
  try {
    (void)parse_spec(yaml, "inline.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "the spec was accepted:\n" << yaml.substr(0, 2000);
  return {};
}

#define EXPECT_CONTAINS(text, fragment)               \
  EXPECT_NE((text).find(fragment), std::string::npos) \
      << "expected: " << (fragment) << "\ngot: " << (text)

TEST(SpecInput, AHugeCaptureSizeListIsRefusedWithoutReadingIt) {
  std::string list = "cuda_graphs:\n  capture_sizes: [";
  for (int i = 0; i < 450'000; ++i) list += (i ? ", " : "") + std::to_string(i % 8192 + 1);
  const std::string msg = message_of(kTiny + list + "]\n");
  EXPECT_CONTAINS(msg,
                  "inline.yaml:11:18: cuda_graphs.capture_sizes: lists 450000 sizes, more "
                  "than the 1024 a spec may capture");
  EXPECT_CONTAINS(msg, "has 1 problem:");
}

TEST(SpecInput, ALongAscendingCaptureSizeListIsAccepted) {
  std::string list = "cuda_graphs:\n  capture_sizes: [";
  for (int i = 1; i <= 1024; ++i) list += (i > 1 ? ", " : "") + std::to_string(i);
  const EngineSpec spec = parse_spec(kTiny + list + "]\n");
  EXPECT_EQ(spec.cuda_graphs.capture_sizes.size(), 1024u);
  EXPECT_EQ(spec.cuda_graphs.max_capture_size, 1024);
  // Repeats and disorder are found against the previous size.
  const std::string msg = message_of(kTiny + std::string("cuda_graphs:\n  capture_sizes: [1, 8, "
                                                         "8, 4, 16]\n"));
  EXPECT_CONTAINS(msg, "cuda_graphs.capture_sizes[2]: capture size 8 is duplicated");
  EXPECT_CONTAINS(msg,
                  "cuda_graphs.capture_sizes[3]: capture sizes must be sorted ascending: 4 "
                  "comes after 8");
}

TEST(SpecInput, OtherListsAreBoundedToo) {
  std::string pattern = "  attention:\n    sliding_window_pattern: [";
  for (int i = 0; i < 5000; ++i) pattern += i ? ", 0" : "0";
  EXPECT_CONTAINS(message_of(kTiny + pattern + "]\n"),
                  "model.attention.sliding_window_pattern: has 5000 entries, more than the 4096 "
                  "layers a model may have");
  std::string overrides = "  layers:\n";
  for (int i = 0; i < 4097; ++i) overrides += "    - {layers: \"0..3\", alibi: true}\n";
  EXPECT_CONTAINS(message_of(kTiny + overrides),
                  "model.layers: has 4097 overrides, more than the 4096 a spec may have");
  // The default ladder up to max_capture_size: 1M sizes for 2^24.
  EXPECT_CONTAINS(message_of(kTiny + std::string("scheduler:\n  max_num_batched_tokens: 16777216\n"
                                                 "cuda_graphs:\n  max_capture_size: 16777216\n")),
                  "cuda_graphs.max_capture_size: must be in [1, 8192], got 16777216");
  const EngineSpec ladder =
      parse_spec(kTiny + std::string("cuda_graphs:\n  max_capture_size: 8192\n"));
  EXPECT_EQ(ladder.cuda_graphs.capture_sizes.size(), 531u);
}

TEST(SpecInput, FloatFieldsMustHoldInAFloat) {
  const std::string msg = message_of(kTiny + std::string("  rope_theta: 1e-50\n"
                                                         "  rms_norm_eps: 1e-50\n"
                                                         "  attention:\n"
                                                         "    logits_soft_cap: 1e-50\n"
                                                         "  layers:\n"
                                                         "    - layers: 1\n"
                                                         "      logits_soft_cap: -1e-45\n"));
  EXPECT_CONTAINS(msg,
                  "inline.yaml:10:15: model.rope_theta: got 1e-50, smaller than the "
                  "smallest normal 32-bit float, 1.17549e-38");
  EXPECT_CONTAINS(msg, "inline.yaml:11:17: model.rms_norm_eps: got 1e-50, smaller than");
  EXPECT_CONTAINS(msg, "inline.yaml:13:22: model.attention.logits_soft_cap: got 1e-50");
  EXPECT_CONTAINS(msg,
                  "inline.yaml:16:24: model.layers[0].logits_soft_cap: must be a finite "
                  "number in [0, 1e+06], got -1e-45");
  // Past a double, and the denormal range of a float.
  EXPECT_CONTAINS(message_of(kTiny + std::string("  rms_norm_eps: 1e-400\n")),
                  "model.rms_norm_eps: must be a finite number in (0, 1], got '1e-400', which is "
                  "past what a double holds");
  EXPECT_CONTAINS(message_of(kTiny + std::string("  rms_norm_eps: 1e-39\n")),
                  "model.rms_norm_eps: got 1e-39, smaller than the smallest normal");
  EXPECT_CONTAINS(message_of(kTiny + std::string("  rope_theta: .inf\n")),
                  "model.rope_theta: must be a finite number in (0, 1e+12], got .inf");
  EXPECT_CONTAINS(message_of(kTiny + std::string("  rope_theta: .nan\n")),
                  "model.rope_theta: must be a finite number");
  EXPECT_CONTAINS(message_of(kTiny + std::string("  rope_theta: 0x10\n")),
                  "model.rope_theta: expected a number, got '0x10'");
  // Zero stays zero (a soft cap of 0 is "off"), and ordinary values are kept.
  const EngineSpec spec = parse_spec(kTiny + std::string("  rms_norm_eps: 1e-6\n"
                                                         "  rope_theta: +5e5\n"
                                                         "  attention:\n"
                                                         "    logits_soft_cap: 0\n"));
  EXPECT_FLOAT_EQ(spec.model.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(spec.model.rope_theta, 5e5f);
  EXPECT_EQ(spec.model.layers[0].logits_soft_cap, 0.0f);
  // The budget's fraction is a number too.
  EXPECT_CONTAINS(message_of(kTiny + std::string("cache:\n  memory_budget: 1e-400\n")),
                  "cache.memory_budget: expected a fraction of device memory in (0, 1] or a size "
                  "such as 70GiB, got '1e-400'");
  EXPECT_CONTAINS(
      message_of(kTiny +
                 std::string("cache:\n  memory_budget: " + std::string(400, '9') + "GiB\n")),
      "cache.memory_budget: expected a fraction");
}

TEST(SpecInput, IntegersPast64BitsAreOutOfRange) {
  EXPECT_CONTAINS(message_of(kTiny + std::string("scheduler:\n  max_num_seqs: "
                                                 "99999999999999999999\n")),
                  "inline.yaml:11:17: scheduler.max_num_seqs: must be in [1, 1048576], got "
                  "'99999999999999999999' (past the 64-bit integers)");
}

TEST(SpecInput, ASecondDocumentIsRefusedWhereItStarts) {
  EXPECT_CONTAINS(message_of(kTiny + std::string("---\nmodel:\n  name: other\n")),
                  "inline.yaml:10:1: a second YAML document starts here; a spec is one document");
  EXPECT_CONTAINS(message_of(kTiny + std::string("--- # nothing after\n")),
                  "inline.yaml:10:1: a second YAML document");
  // Text that cannot start a value: yaml-cpp's LoadAll would read empty documents forever.
  EXPECT_CONTAINS(message_of("\xEF\xBB\xBF,(,,"),
                  "inline.yaml:1:1: YAML syntax error: no value can start with ','");
  EXPECT_CONTAINS(message_of("# comment\n,"),
                  "inline.yaml:2:1: YAML syntax error: no value can start with ','");
  // A leading "---" or a closing "..." is one document.
  EXPECT_NO_THROW((void)parse_spec("---\n" + std::string(kTiny) + "...\n"));
  EXPECT_CONTAINS(message_of(""), "a spec is a mapping");
}

TEST(SpecInput, EchoedTextIsEscapedAndShortened) {
  const std::string msg = message_of(kTiny + std::string("  \"na\\ame\\nx\": 1\n"
                                                         "  dtype: \"bf\\x1b[31m16\"\n"));
  EXPECT_CONTAINS(msg, "inline.yaml:10:3: model.na\\x07me\\nx: unknown key 'na\\x07me\\nx'");
  EXPECT_CONTAINS(msg,
                  "model.dtype: expected one of bf16, f16, f32, bfloat16, float16, float32; "
                  "got 'bf\\x1B[31m16'");
  const std::string long_value =
      message_of(kTiny + std::string("  dtype: ") + std::string(5000, 'b') + "\n");
  EXPECT_CONTAINS(long_value, "got '" + std::string(80, 'b') + "…' (5000 bytes)");
  EXPECT_LT(long_value.size(), 400u);
  // YAML keeps implicit keys under 1024 characters; an explicit key ("? key") may be longer.
  const std::string long_key =
      message_of(std::string(kTiny) + "  ? " + std::string(100'000, 'k') + "\n  : 1\n");
  EXPECT_CONTAINS(long_key, "model." + std::string(80, 'k') + "…: unknown key '");
  EXPECT_LT(long_key.size(), 600u);
  for (const char c : msg + long_value + long_key) {
    EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\n') << int(c);
  }
  // Thousands of problems: the first hundred are listed, the rest counted.
  std::string keys;
  for (int i = 0; i < 5000; ++i) keys += "  unknown_" + std::to_string(i) + ": 1\n";
  const std::string many = message_of(kTiny + keys);
  EXPECT_CONTAINS(many, "has 5000 problems:");
  EXPECT_CONTAINS(many, "(4900 more not shown)");
}

TEST(SpecInput, DeepNestingIsASyntaxError) {
  const std::string msg =
      message_of("model: " + std::string(100'000, '[') + std::string(100'000, ']') + "\n");
  EXPECT_CONTAINS(msg, "inline.yaml:1:");
  EXPECT_CONTAINS(msg, "YAML syntax error: nested too deeply");
}

TEST(SpecInput, ASequenceNeedsTwoPositions) {
  std::string spec = kTiny;
  spec.replace(spec.find("4096"), 4, "1");
  EXPECT_CONTAINS(message_of(spec),
                  "inline.yaml:9:28: model.max_position_embeddings: must be at least 2 (a "
                  "sequence holds at least one prompt token and one generated token), got 1");
  EXPECT_CONTAINS(message_of(kTiny + std::string("scheduler:\n  max_model_len: 1\n")),
                  "inline.yaml:11:18: scheduler.max_model_len: must be at least 2");
  EXPECT_EQ(
      parse_spec(kTiny + std::string("scheduler:\n  max_model_len: 2\n")).scheduler.max_model_len,
      2);
}

TEST(SpecInput, OnlyRegularFilesOfBoundedSizeAreRead) {
  for (const char* path : {"/dev/zero", "/dev/null", "/"}) {
    try {
      (void)load_spec(path);
      ADD_FAILURE() << "read " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << path;
      EXPECT_CONTAINS(e.message(), std::string("spec file '") + path + "' is a ");
      EXPECT_CONTAINS(e.message(), "not a regular file");
    }
  }
  const std::filesystem::path big = std::filesystem::temp_directory_path() /
                                    ("ff_big_spec_" + std::to_string(::getpid()) + ".yaml");
  { std::ofstream(big) << kTiny << "# " << std::string(2 << 20, 'x') << "\n"; }
  try {
    (void)load_spec(big.string());
    ADD_FAILURE() << "read a 2 MiB spec";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.message(), "' is " + std::to_string(std::filesystem::file_size(big)) +
                                     " bytes (2.00 MiB), more than the 1.00 MiB a spec file may "
                                     "be");
  }
  std::filesystem::remove(big);
}

/// A backend known by another name: the reference backend under `name`.
class Renamed : public AttentionBackend {
 public:
  Renamed(std::string name, const AttentionBackend& inner)
      : name_(std::move(name)), inner_(inner) {}
  std::string_view name() const override { return name_; }
  bool is_mla() const override { return inner_.is_mla(); }
  std::unique_ptr<AttentionImpl> make_impl(const AttentionParams& params,
                                           DcpGroup dcp) const override {
    return inner_.make_impl(params, dcp);
  }
  std::unique_ptr<MlaImpl> make_mla_impl(const MlaParams& params, const MlaWeights& weights,
                                         DcpGroup dcp) const override {
    return inner_.make_mla_impl(params, weights, dcp);
  }
  std::unique_ptr<MetadataBuilder> make_builder(const BatchLimits& limits,
                                                void* device_memory) const override {
    return inner_.make_builder(limits, device_memory);
  }
  GraphSupport graph_support() const override { return inner_.graph_support(); }
  std::vector<std::int64_t> kv_cache_shape(std::int64_t num_blocks, int block_size,
                                           int num_kv_heads, int head_size,
                                           DType cache_dtype) const override {
    return inner_.kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype);
  }
  std::vector<int> kv_cache_stride_order() const override { return inner_.kv_cache_stride_order(); }
  bool accept_output_buffer() const override { return inner_.accept_output_buffer(); }
  bool supports_quant_query_input() const override { return inner_.supports_quant_query_input(); }
  std::span<const int> supported_head_sizes() const override {
    return inner_.supported_head_sizes();
  }
  std::span<const DType> supported_kv_cache_dtypes() const override {
    return inner_.supported_kv_cache_dtypes();
  }

 private:
  std::string name_;
  const AttentionBackend& inner_;
};

TEST(SpecInput, BackendsAreLookedUpInTheGivenRegistry) {
  BackendRegistry registry;
  registry.add(std::make_unique<Renamed>("house_attention", find_backend("reference")));
  const std::string yaml = kTiny + std::string("  attention:\n    backend: house_attention\n");
  const EngineSpec spec = parse_spec(yaml, "inline.yaml", registry);
  EXPECT_EQ(spec.model.layers[3].backend, "house_attention");
  EXPECT_EQ(spec.registry, &registry);
  // The plan finds the backend in the spec's registry: the global one does not know it.
  const MemoryPlan plan = plan_memory(spec, std::int64_t(8) << 30);
  EXPECT_GT(plan.kv_cache.num_blocks, 0);
  EXPECT_CONTAINS(message_of(yaml),
                  "inline.yaml:11:14: model.attention.backend: unknown "
                  "attention backend 'house_attention'; registered: "
                  "mla, paged, reference, reference_mla");
  // The checks against the backend use the registry's backend too.
  std::string odd_head = yaml;
  odd_head.replace(odd_head.find("num_kv_heads: 2"), 15, "head_size: 72");
  try {
    (void)parse_spec(odd_head, "inline.yaml", registry);
    ADD_FAILURE() << "accepted head size 72";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.message(), "backend 'house_attention' cannot run head size 72");
  }
  // The default backend must be in the registry as well.
  try {
    (void)parse_spec(kTiny, "inline.yaml", registry);
    ADD_FAILURE() << "accepted a default backend the registry lacks";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.message(),
                    "model.attention.backend: layers 0..3: the default backend "
                    "'reference' is not registered");
  }
  // load_spec takes the registry as well.
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("ff_registry_spec_" + std::to_string(::getpid()) + ".yaml");
  { std::ofstream(file) << yaml; }
  EXPECT_EQ(load_spec(file.string(), registry).model.layers[0].backend, "house_attention");
  EXPECT_THROW((void)load_spec(file.string()), Error);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace freezeframe
