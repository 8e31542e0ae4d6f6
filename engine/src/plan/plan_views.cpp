#include "freezeframe/engine/plan/plan_views.h"

#include <string>

#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/spec/deployment.h"

namespace freezeframe {
namespace {

const char* region_of(TensorHome home) {
  switch (home) {
    case TensorHome::kActivation: return "activations";
    case TensorHome::kInput: return "staging";
    case TensorHome::kOutput: return "outputs";
  }
  return "";
}

}  // namespace

PlanViews bind_plan(const EngineSpec& spec, const ModelProgram& program, const Arena& arena) {
  const MemoryPlan& plan = arena.plan();
  const ModelSpec& model = spec.model;
  PlanViews views;

  views.weights.resize(program.weights.size());
  if (plan.find("weights") != nullptr) {
    for (std::size_t i = 0; i < program.weights.size(); ++i) {
      const ProgramWeight& w = program.weights[i];
      views.weights[i] = arena.placement_view("weights", w.name, w.dtype, w.shape);
    }
  }

  const auto lifetimes = program.lifetimes();
  views.tensors.resize(program.tensors.size());
  for (std::size_t i = 0; i < program.tensors.size(); ++i) {
    const ProgramTensor& t = program.tensors[i];
    if (lifetimes[i].first_op < 0) continue;
    const std::int64_t rows = t.rows == Rows::kTokens ? spec.scheduler.max_num_batched_tokens
                                                      : spec.scheduler.max_num_seqs;
    const std::int64_t shape[] = {rows, t.width};
    views.tensors[i] = arena.placement_view(region_of(t.home), t.name, t.dtype, shape);
  }

  views.kv_caches.resize(model.num_layers);
  const std::int64_t blocks = plan.kv_cache.num_blocks;
  const KvGeometry kv = DeploymentGeometry::of(spec).kv;
  for (int l = 0; l < model.num_layers; ++l) {
    const LayerSpec& layer = model.layers[l];
    if (!uses_kv_cache(layer.attention_type)) continue;
    const AttentionBackend& backend = spec.backend(l);
    const std::string name = "layers." + std::to_string(l) + ".kv_cache";
    const std::int64_t bytes = kv_cache_bytes(backend, blocks, spec.cache.block_size,
                                              kv.num_kv_heads, kv.head_width, kv.dtype);
    std::byte* data = arena.placement_data("kv_cache", name, bytes);
    views.kv_caches[l] = kv_cache_view(backend, data, arena.device(), blocks, spec.cache.block_size,
                                       kv.num_kv_heads, kv.head_width, kv.dtype);
    FF_CHECK(views.kv_caches[l].span_bytes() <= bytes, ErrorCode::kInternal, "the KV cache view ",
             views.kv_caches[l].describe(), " of layer ", l, " reaches past its ", bytes, " bytes");
  }
  return views;
}

}  // namespace freezeframe
