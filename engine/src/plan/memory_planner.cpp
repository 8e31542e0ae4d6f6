#include "freezeframe/engine/plan/memory_planner.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/core/nvtx.h"
#include "freezeframe/engine/plan/staging_layout.h"
#include "freezeframe/engine/spec/layer_params.h"
#include "freezeframe/memory/lifetime_packer.h"

namespace freezeframe {
namespace {

constexpr std::int64_t kAlign = MemoryPlan::kAlignment;

std::string fraction_text(double fraction) {
  std::ostringstream out;
  out << fraction;
  return out.str();
}

/// Adds a region holding `items` (name, bytes) back to back, each aligned.
void add_packed_region(MemoryPlan& plan, const std::string& name, RegionKind kind,
                       const std::vector<std::pair<std::string, std::int64_t>>& items) {
  std::int64_t at = 0;
  std::vector<std::int64_t> offsets;
  for (const auto& item : items) {
    offsets.push_back(at);
    at += align_up(item.second, kAlign);
  }
  plan.add_region(name, kind, at);
  for (std::size_t i = 0; i < items.size(); ++i) {
    plan.add_placement(name, {items[i].first, offsets[i], items[i].second});
  }
}

struct CacheLayer {
  int layer = 0;
  const AttentionBackend* backend = nullptr;
  std::int64_t bytes_per_block = 0;
};

}  // namespace

std::int64_t attention_workspace_bytes(const EngineSpec& spec, const DeploymentGeometry& geometry,
                                       const DeviceProperties& device) {
  const ModelSpec& model = spec.model;
  const BatchLimits limits = geometry.batch_limits();
  std::int64_t most = 0;
  for (int l = 0; l < model.num_layers; ++l) {
    const AttentionBackend& backend = spec.backend(l);
    const std::size_t bytes =
        geometry.kv.latent ? backend.mla_workspace_bytes(mla_params(spec), limits, device)
                           : backend.workspace_bytes(attention_params(spec, l), limits, device);
    most = std::max(most, static_cast<std::int64_t>(bytes));
  }
  return most;
}

MemoryPlan plan_memory(const EngineSpec& spec, std::int64_t device_bytes,
                       const DeviceProperties& device) {
  const NvtxRange range("plan");
  FF_CHECK(device_bytes > 0, ErrorCode::kInvalidArgument, "device memory must be positive, got ",
           device_bytes);
  const ModelSpec& model = spec.model;
  const MemoryBudget& budget_spec = spec.cache.memory_budget;
  const std::int64_t budget = budget_spec.resolve(device_bytes);
  FF_CHECK(budget <= device_bytes, ErrorCode::kInvalidArgument, spec.where("cache.memory_budget"),
           ": the budget of ", budget, " bytes (", format_bytes(budget),
           ") is more than the device's ", device_bytes, " bytes (", format_bytes(device_bytes),
           ")");
  MemoryPlan plan(budget);
  plan.device_bytes = device_bytes;
  const ModelProgram program = build_model_program(spec);
  const DeploymentGeometry geometry = DeploymentGeometry::of(spec);
  const std::int64_t tokens = spec.scheduler.max_num_batched_tokens;
  const std::int64_t seqs = spec.scheduler.max_num_seqs;

  // Weights, in program order: the built-in random ones or a checkpoint's. Without either an
  // embedder brings its own and the plan holds none.
  if (model.builtin_weights || model.checkpoint) {
    std::vector<std::pair<std::string, std::int64_t>> items;
    for (const ProgramWeight& w : program.weights) items.emplace_back(w.name, w.bytes());
    add_packed_region(plan, "weights", RegionKind::kWeights, items);
  }

  // Activations: lifetimes over the program's ops, packed greedy by size.
  {
    std::vector<int> ids;
    const std::vector<TensorLifetime> items = activation_lifetimes(program, tokens, seqs, &ids);
    const PackedLayout packed = pack_lifetimes(items, kAlign);
    plan.add_region("activations", RegionKind::kActivations, packed.peak_bytes);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Placement p{program.tensors[ids[i]].name, packed.offsets[i], items[i].bytes};
      p.first_step = items[i].first_step;
      p.last_step = items[i].last_step;
      plan.add_placement("activations", std::move(p));
    }
    plan.activations.peak_bytes = packed.peak_bytes;
    plan.activations.lower_bound_bytes = packed.lower_bound_bytes;
    plan.activations.num_tensors = static_cast<int>(items.size());
    plan.activations.num_steps = static_cast<int>(program.ops.size());
  }

  // The staged image of a step (program inputs, attention metadata, backends' plan slices,
  // the block table), uploaded by one copy: its layout is fixed here.
  const StagingLayout staging = staging_layout(spec, program, geometry, device);
  plan.add_region("staging", RegionKind::kStaging, static_cast<std::int64_t>(staging.total_bytes));
  for (const StagingSlice& slice : staging.slices) {
    plan.add_placement("staging", {slice.name, static_cast<std::int64_t>(slice.offset),
                                   static_cast<std::int64_t>(slice.bytes)});
  }
  std::vector<std::pair<std::string, std::int64_t>> outputs;
  for (const ProgramTensor& t : program.tensors) {
    if (t.home == TensorHome::kOutput) outputs.emplace_back(t.name, t.bytes(tokens, seqs));
  }
  add_packed_region(plan, "outputs", RegionKind::kOutputs, outputs);

  // Workspaces shared by all layers (they run one after another).
  const std::int64_t attention_ws = attention_workspace_bytes(spec, geometry, device);
  if (attention_ws > 0)
    plan.add_region("attention_workspace", RegionKind::kWorkspace, attention_ws);
  plan.add_region("cublas_workspace", RegionKind::kWorkspace, kCublasWorkspaceBytes);

  // KV cache: whole blocks in what is left. Layers sharing a cache add nothing.
  const KvGeometry& kv_geometry = geometry.kv;
  const int block_size = geometry.limits.block_size;
  auto layer_cache_bytes = [&](const CacheLayer& c, std::int64_t blocks) {
    return kv_cache_bytes(*c.backend, blocks, block_size, kv_geometry.num_kv_heads,
                          kv_geometry.head_width, kv_geometry.dtype);
  };
  std::vector<CacheLayer> cache_layers;
  std::int64_t bytes_per_block = 0;
  for (int l = 0; l < model.num_layers; ++l) {
    const LayerSpec& layer = model.layers[l];
    if (layer.kv_sharing_target >= 0 || !uses_kv_cache(layer.attention_type)) continue;
    CacheLayer c;
    c.layer = l;
    c.backend = &spec.backend(l);
    c.bytes_per_block = layer_cache_bytes(c, 1);
    bytes_per_block += c.bytes_per_block;
    cache_layers.push_back(c);
  }
  auto cache_bytes_for = [&](std::int64_t blocks) {
    std::int64_t total = 0;
    for (const CacheLayer& c : cache_layers)
      total += align_up(layer_cache_bytes(c, blocks), kAlign);
    return total;
  };
  const std::int64_t fixed = align_up(plan.used_bytes(), kAlign);
  const std::int64_t remaining = std::max<std::int64_t>(0, budget - fixed);
  const std::int64_t blocks_per_seq = geometry.limits.max_blocks_per_req;
  std::int64_t num_blocks = 0;
  if (bytes_per_block > 0) {
    num_blocks = remaining / bytes_per_block;
    while (num_blocks > 0 && cache_bytes_for(num_blocks) > remaining) --num_blocks;
    if (num_blocks > kMaxKvBlocks) {
      plan.warnings.push_back(spec.where("cache.memory_budget") + ": the budget has room for " +
                              std::to_string(num_blocks) +
                              " KV blocks; block ids are 32-bit, so the cache keeps " +
                              std::to_string(kMaxKvBlocks) + " and leaves " +
                              format_bytes(remaining - cache_bytes_for(kMaxKvBlocks)) + " unused");
      num_blocks = kMaxKvBlocks;
    }
    if (num_blocks < blocks_per_seq) {
      const std::int64_t needed = cache_bytes_for(blocks_per_seq);
      const std::int64_t missing = fixed + needed - budget;
      FF_THROW(
          ErrorCode::kOutOfMemory, spec.where("cache.memory_budget"), ": the budget of ",
          format_bytes(budget), " (", budget, " bytes",
          budget_spec.bytes > 0
              ? ""
              : " = " + fraction_text(budget_spec.fraction) + " of " + format_bytes(device_bytes),
          ") cannot hold the weights (",
          format_bytes(plan.find("weights") ? plan.region("weights").bytes : 0),
          ") and the other fixed regions (",
          format_bytes(fixed - (plan.find("weights") ? plan.region("weights").bytes : 0)),
          ") plus one max-length sequence of KV cache (", spec.scheduler.max_model_len,
          " tokens = ", blocks_per_seq, " blocks of ", format_bytes(bytes_per_block), " = ",
          format_bytes(needed), "): ", missing, " bytes (", format_bytes(missing), ") are missing");
    }
  }
  plan.add_region("kv_cache", RegionKind::kKvCache, cache_bytes_for(num_blocks));
  std::map<int, std::int64_t> cache_offset, cache_size;
  std::int64_t at = 0;
  for (const CacheLayer& c : cache_layers) {
    const std::int64_t bytes = layer_cache_bytes(c, num_blocks);
    FF_CHECK(bytes == num_blocks * c.bytes_per_block, ErrorCode::kInternal, "backend '",
             c.backend->name(), "': KV cache bytes are not linear in the block count");
    plan.add_placement("kv_cache", {"layers." + std::to_string(c.layer) + ".kv_cache", at, bytes});
    cache_offset[c.layer] = at;
    cache_size[c.layer] = bytes;
    at += align_up(bytes, kAlign);
  }
  for (int l = 0; l < model.num_layers; ++l) {
    const int target = model.layers[l].kv_sharing_target;
    if (target < 0) continue;
    const std::string target_name = "layers." + std::to_string(target) + ".kv_cache";
    const std::int64_t bytes = cache_size.at(target);  // same backend and shape (validated)
    Placement p{"layers." + std::to_string(l) + ".kv_cache", cache_offset.at(target), bytes};
    p.aliases = target_name;
    plan.add_placement("kv_cache", std::move(p));
  }

  KvCacheSummary& kv = plan.kv_cache;
  kv.num_blocks = num_blocks;
  kv.block_size = block_size;
  kv.bytes_per_block = bytes_per_block;
  kv.cache_layers = static_cast<int>(cache_layers.size());
  kv.tokens_per_rank = num_blocks * block_size;
  kv.tp_world_size = geometry.rank.tp_size;
  kv.dcp_world_size = geometry.rank.dcp_world_size;
  kv.dcp_interleave_size = geometry.rank.dcp_interleave_size;
  kv.deployment_tokens = kv.tokens_per_rank * geometry.rank.dcp_world_size;
  kv.max_model_len = spec.scheduler.max_model_len;
  // Every rank has num_blocks blocks; a max-length sequence takes blocks_per_seq of them on
  // rank 0, the rank holding the most of its tokens.
  kv.max_concurrent_sequences = blocks_per_seq > 0 ? num_blocks / blocks_per_seq : 0;

  // Capture sizes off the default grid make padding cliffs (docs/DESIGN.md, "CUDA graphs").
  if (spec.cuda_graphs.capture_sizes_explicit && !spec.cuda_graphs.capture_sizes.empty()) {
    const std::vector<int> grid = default_capture_sizes(spec.cuda_graphs.max_capture_size);
    std::string off;
    for (const int s : spec.cuda_graphs.capture_sizes) {
      if (!std::binary_search(grid.begin(), grid.end(), s))
        (off += off.empty() ? "" : ", ") += std::to_string(s);
    }
    if (!off.empty()) {
      plan.warnings.push_back(spec.where("cuda_graphs.capture_sizes") + ": sizes " + off +
                              " are off the default ladder; batches between sizes pad up to the "
                              "next captured one");
    }
  }
  plan.check_fits();
  return plan;
}

}  // namespace freezeframe
