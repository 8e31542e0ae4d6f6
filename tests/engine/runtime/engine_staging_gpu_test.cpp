// The engine's plan and staged image on the GPU: the plan the engine makes equals the dry run
// given the device's properties, and a backend's plan hook reaches the device in every mode.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>

#include "engine/runtime/engine_test_util.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/device_properties.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

using testing::random_shape;
using testing::TestBatch;
using testing::tiny_spec;

// The plan the engine makes on the GPU is the dry run's, given the device's properties: no
// backend asks the GPU anything that shapes memory.
TEST(Engine, PlanEqualsTheDryRunWithTheDevicesProperties) {
  FF_REQUIRE_GPU();
  const EngineSpec spec = parse_spec(tiny_spec("paged_decode", "  mode: full_and_piecewise\n"));
  const std::int64_t device_memory = std::int64_t(2) << 30;
  EngineOptions options;
  options.device_memory = device_memory;
  options.capture_graphs = false;
  const Engine engine(spec, options);
  DeviceProperties device = DeviceProperties::h200();
  device.sm_count = current_device_properties().sm_count;  // all the plan depends on
  const MemoryPlan dry = plan_memory(spec, device_memory, device);
  const MemoryPlan& real = engine.plan();
  ASSERT_EQ(dry.regions().size(), real.regions().size());
  for (std::size_t i = 0; i < dry.regions().size(); ++i) {
    const MemoryRegion& a = dry.regions()[i];
    const MemoryRegion& b = real.regions()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.offset, b.offset) << a.name;
    EXPECT_EQ(a.bytes, b.bytes) << a.name;
    EXPECT_EQ(a.placements.size(), b.placements.size()) << a.name;
  }
  EXPECT_GT(real.find("attention_workspace") ? real.region("attention_workspace").bytes : 0, 0)
      << "paged_decode states a split-KV workspace";
  EXPECT_EQ(dry.kv_cache.num_blocks, real.kv_cache.num_blocks);
}

// A backend's plan hook: the reference backend under another name, whose plan writes four
// int32 of each step (requests and rows as padded, Σ seq_len, a marker) into its slice of the
// staged image, and whose forward copies the slice it finds on the device (inside the graphs
// too) where the test reads it.
DeviceBuffer& plan_probe_out() {
  static DeviceBuffer buffer(4 * sizeof(std::int32_t));
  return buffer;
}

class PlanProbeImpl final : public AttentionImpl {
 public:
  PlanProbeImpl(std::unique_ptr<AttentionImpl> inner, DcpGroup dcp)
      : AttentionImpl(inner->params(), dcp), inner_(std::move(inner)) {}
  bool can_return_lse_for_decode() const override { return true; }
  bool fused_output_quant_supported(const QuantKey& key) const override {
    return inner_->fused_output_quant_supported(key);
  }
  std::size_t workspace_bytes(const BatchLimits& limits) const override {
    return inner_->workspace_bytes(limits);
  }
  void forward(const AttentionLayer& layer, const TensorView& q, const TensorView& k,
               const TensorView& v, const TensorView& kv_cache, const AttentionMetadata& md,
               const TensorView& out, cudaStream_t stream, const TensorView& lse,
               const OutputQuant& quant) override {
    inner_->forward(layer, q, k, v, kv_cache, md, out, stream, lse, quant);
    FF_CHECK(md.plan != nullptr, ErrorCode::kInternal, "no plan slice");
    FF_CUDA_CHECK(cudaMemcpyAsync(plan_probe_out().data(), md.plan, 4 * sizeof(std::int32_t),
                                  cudaMemcpyDeviceToDevice, stream));
  }

 private:
  std::unique_ptr<AttentionImpl> inner_;
};

class PlanProbeBackend final : public AttentionBackend {
 public:
  const AttentionBackend& ref() const { return find_backend("reference"); }
  std::string_view name() const override { return "plan_probe"; }
  bool is_mla() const override { return false; }
  GraphSupport graph_support() const override { return ref().graph_support(); }
  std::vector<std::int64_t> kv_cache_shape(std::int64_t blocks, int block_size, int heads,
                                           int head_size, DType dtype) const override {
    return ref().kv_cache_shape(blocks, block_size, heads, head_size, dtype);
  }
  std::vector<int> kv_cache_stride_order() const override { return ref().kv_cache_stride_order(); }
  bool accept_output_buffer() const override { return true; }
  bool supports_quant_query_input() const override { return false; }
  std::span<const int> supported_head_sizes() const override {
    return ref().supported_head_sizes();
  }
  std::span<const DType> supported_kv_cache_dtypes() const override {
    return ref().supported_kv_cache_dtypes();
  }
  std::unique_ptr<AttentionImpl> make_impl(const AttentionParams& p, DcpGroup dcp) const override {
    return std::make_unique<PlanProbeImpl>(ref().make_impl(p, dcp), dcp);
  }
  std::size_t plan_bytes(const BatchLimits&, const DeviceProperties&) const override { return 64; }
  void plan(const CommonAttentionMetadata& c, std::span<std::byte> slice) const override {
    std::int32_t values[4] = {static_cast<std::int32_t>(c.seq_lens.size()), c.num_tokens, 0,
                              0xF00D};
    for (const std::int32_t len : c.seq_lens) values[2] += len;
    std::memcpy(slice.data(), values, sizeof values);
  }
};

TEST(Engine, BackendPlansReachTheDeviceInEveryMode) {
  FF_REQUIRE_GPU();
  if (!BackendRegistry::global().contains("plan_probe")) {
    BackendRegistry::global().add(std::make_unique<PlanProbeBackend>());
  }
  Engine engine(parse_spec(tiny_spec("plan_probe",
                                     "  mode: full_and_piecewise\n"
                                     "  capture_sizes: [1, 2, 4, 8, 16]\n")));
  ASSERT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
  ASSERT_NE(engine.plan().region("staging").placements.size(), 0u);
  bool slice = false;
  for (const Placement& p : engine.plan().region("staging").placements) {
    slice = slice || (p.name == "plan.plan_probe" && p.bytes == 64);
  }
  EXPECT_TRUE(slice) << "the plan holds the backend's slice";
  std::mt19937 rng(9);
  for (const auto& [decodes, prefills, eager] :
       {std::tuple{3, 0, false}, std::tuple{2, 1, false}, std::tuple{5, 2, true},
        std::tuple{16, 0, false}}) {
    const TestBatch batch(random_shape(decodes, prefills, 3, 150, rng), 16,
                          engine.limits().num_blocks, rng);
    FF_CUDA_CHECK(cudaMemset(plan_probe_out().data(), 0, plan_probe_out().bytes()));
    const StepResult r = engine.step(batch.batch(), {.eager = eager});
    engine.synchronize();
    std::int32_t got[4] = {};
    FF_CUDA_CHECK(cudaMemcpy(got, plan_probe_out().data(), sizeof got, cudaMemcpyDeviceToHost));
    int seq_sum = 0;
    for (const StepRequest& q : batch.batch().requests) seq_sum += q.seq_len;
    // Graphs run a step padded to their descriptor (Note [Padding a step]).
    const int reqs = r.mode == RuntimeMode::kEager ? static_cast<int>(batch.batch().requests.size())
                     : r.descriptor.num_reqs > 0
                         ? r.descriptor.num_reqs
                         : std::min(r.descriptor.num_tokens, engine.limits().max_num_seqs);
    SCOPED_TRACE(std::string(to_string(r.mode)) + ", " + std::to_string(decodes) + " decodes");
    EXPECT_EQ(got[0], reqs);
    EXPECT_EQ(got[1], r.descriptor.num_tokens);
    EXPECT_EQ(got[2], seq_sum) << "padded requests have length 0";
    EXPECT_EQ(got[3], 0xF00D);
  }
}

}  // namespace
}  // namespace freezeframe
