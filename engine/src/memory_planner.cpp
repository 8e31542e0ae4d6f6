#include "freezeframe/engine/memory_planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/engine/layer_params.h"
#include "freezeframe/core/nvtx.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/core/error.h"
#include "freezeframe/memory/lifetime_packer.h"

namespace freezeframe {
namespace {

constexpr std::int64_t kAlign = MemoryPlan::kAlignment;

std::string fraction_text(double fraction) {
  std::ostringstream out;
  out << fraction;
  return out.str();
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

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

/// Bytes of the reference MLA impl's f32 workspace (its regions, each 256-aligned): q, the
/// absorbed query, the latent output, then the expanded keys and values of the prefill context.
std::int64_t reference_mla_workspace_bytes(const ModelSpec& model, const BatchLimits& limits) {
  const MlaSpec& m = *model.mla;
  const std::int64_t heads = model.num_heads, tokens = limits.max_num_tokens;
  const std::int64_t context =
      limits.max_prefill_context_tokens > 0
          ? limits.max_prefill_context_tokens
          : std::max<std::int64_t>(limits.max_num_tokens,
                                   std::int64_t(limits.max_blocks_per_req) * limits.block_size);
  const std::int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  auto f32 = [](std::int64_t elements) { return align_up(elements * 4, kAlign); };
  return f32(tokens * heads * qk) + f32(tokens * heads * (m.kv_lora_rank + m.qk_rope_head_dim)) +
         f32(tokens * heads * m.kv_lora_rank) + f32(context * heads * qk) +
         f32(context * heads * m.v_head_dim);
}

struct CacheLayer {
  int layer = 0;
  const AttentionBackend* backend = nullptr;
  int kv_heads = 0;
  int head_size = 0;
  std::int64_t bytes_per_block = 0;
};

}  // namespace

std::int64_t dcp_rank_tokens(std::int64_t length, int world_size, int interleave_size,
                             int rank) {
  const std::int64_t w = world_size, i = interleave_size;
  const std::int64_t base = (length / (i * w)) * i;
  const std::int64_t rem = length - base * w;
  return base + std::clamp<std::int64_t>(rem - rank * i, 0, i);
}

BatchLimits batch_limits(const EngineSpec& spec) {
  BatchLimits limits;
  limits.max_num_reqs = spec.scheduler.max_num_seqs;
  limits.max_num_tokens = spec.scheduler.max_num_batched_tokens;
  limits.block_size = spec.cache.block_size;
  const std::int64_t rank_tokens =
      dcp_rank_tokens(spec.scheduler.max_model_len, spec.dcp.world_size,
                      spec.dcp.interleave_size, 0);
  limits.max_blocks_per_req = static_cast<int>(ceil_div(rank_tokens, spec.cache.block_size));
  limits.max_prefill_context_tokens =
      spec.scheduler.max_prefill_context_tokens > 0
          ? spec.scheduler.max_prefill_context_tokens
          : std::max<std::int64_t>(spec.scheduler.max_num_batched_tokens,
                                   spec.scheduler.max_model_len);
  return limits;
}

std::int64_t attention_workspace_bytes(const EngineSpec& spec, int layer,
                                       const BatchLimits& limits) {
  const ModelSpec& model = spec.model;
  const LayerSpec& l = model.layers.at(layer);
  const AttentionBackend& backend = find_backend(l.backend);
  if (backend.is_mla()) {
    FF_CHECK(backend.name() == "reference_mla", ErrorCode::kUnsupported,
             "no workspace sizing for MLA backend '", backend.name(), "' (layer ", layer, ")");
    return reference_mla_workspace_bytes(model, limits);
  }
  const AttentionParams params = attention_params(spec, layer);
  const auto impl = backend.make_impl(params, DcpGroup{spec.dcp.world_size, 0});
  return static_cast<std::int64_t>(impl->workspace_bytes(limits));
}

MemoryPlan plan_memory(const EngineSpec& spec, std::int64_t device_bytes) {
  const NvtxRange range("plan");
  FF_CHECK(device_bytes > 0, ErrorCode::kInvalidArgument,
           "device memory must be positive, got ", device_bytes);
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
  const std::int64_t tokens = spec.scheduler.max_num_batched_tokens;
  const std::int64_t seqs = spec.scheduler.max_num_seqs;

  // Weights, in program order.
  if (model.builtin_weights) {
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

  // Per-step inputs and outputs, and the attention output buffers.
  std::vector<std::pair<std::string, std::int64_t>> inputs, outputs, attention_outputs;
  for (const ProgramTensor& t : program.tensors) {
    const std::pair<std::string, std::int64_t> item{t.name, t.bytes(tokens, seqs)};
    if (t.home == TensorHome::kInput) inputs.push_back(item);
    if (t.home == TensorHome::kOutput) outputs.push_back(item);
    if (t.home == TensorHome::kAttentionOutput) attention_outputs.push_back(item);
  }
  add_packed_region(plan, "inputs", RegionKind::kInputs, inputs);
  // Persistent metadata, one builder per backend in use, right after the inputs: a step
  // uploads its inputs and the first builder's metadata in one copy.
  const BatchLimits limits = batch_limits(spec);
  std::set<std::string> backends;
  for (const LayerSpec& l : model.layers) backends.insert(l.backend);
  for (const std::string& b : backends) {
    plan.add_region("metadata." + b, RegionKind::kMetadata,
                    static_cast<std::int64_t>(MetadataBuilder::device_bytes(limits)));
  }
  add_packed_region(plan, "outputs", RegionKind::kOutputs, outputs);
  if (!attention_outputs.empty()) {
    add_packed_region(plan, "attention_outputs", RegionKind::kAttentionOutputs, attention_outputs);
  }

  // Workspaces shared by all layers (they run one after another).
  std::int64_t attention_ws = 0;
  for (int l = 0; l < model.num_layers; ++l) {
    attention_ws = std::max(attention_ws, attention_workspace_bytes(spec, l, limits));
  }
  if (attention_ws > 0) plan.add_region("attention_workspace", RegionKind::kWorkspace, attention_ws);
  plan.add_region("cublas_workspace", RegionKind::kWorkspace, kCublasWorkspaceBytes);

  // DCP: per-layer LSE of this rank, and the gathered LSE and partial outputs of all ranks.
  const int world = spec.dcp.world_size;
  if (world > 1) {
    std::vector<std::pair<std::string, std::int64_t>> lse;
    const std::int64_t lse_bytes = tokens * model.num_heads * 4;
    for (int l = 0; l < model.num_layers; ++l) {
      if (!uses_kv_cache(model.layers[l].attention_type)) continue;
      lse.emplace_back("layers." + std::to_string(l) + ".lse", lse_bytes);
    }
    add_packed_region(plan, "dcp_lse", RegionKind::kDcp, lse);
    const std::int64_t v = model.is_mla() ? model.mla->v_head_dim : model.head_size;
    add_packed_region(plan, "dcp_gather", RegionKind::kDcp,
                      {{"lse_all_ranks", world * lse_bytes},
                       {"partial_out_all_ranks", world * tokens * model.num_heads * v * 4}});
  }

  // KV cache: whole blocks in what is left. Layers sharing a cache add nothing.
  const DType cache_dtype = spec.kv_cache_dtype();
  std::vector<CacheLayer> cache_layers;
  std::int64_t bytes_per_block = 0;
  for (int l = 0; l < model.num_layers; ++l) {
    const LayerSpec& layer = model.layers[l];
    if (layer.kv_sharing_target >= 0 || !uses_kv_cache(layer.attention_type)) continue;
    CacheLayer c;
    c.layer = l;
    c.backend = &find_backend(layer.backend);
    c.kv_heads = model.is_mla() ? 1 : model.num_kv_heads;
    c.head_size = model.is_mla() ? model.mla->kv_lora_rank + model.mla->qk_rope_head_dim
                                 : model.head_size;
    c.bytes_per_block =
        kv_cache_bytes(*c.backend, 1, spec.cache.block_size, c.kv_heads, c.head_size, cache_dtype);
    bytes_per_block += c.bytes_per_block;
    cache_layers.push_back(c);
  }
  auto cache_bytes_for = [&](std::int64_t blocks) {
    std::int64_t total = 0;
    for (const CacheLayer& c : cache_layers) {
      total += align_up(kv_cache_bytes(*c.backend, blocks, spec.cache.block_size, c.kv_heads,
                                       c.head_size, cache_dtype),
                        kAlign);
    }
    return total;
  };
  const std::int64_t fixed = align_up(plan.used_bytes(), kAlign);
  const std::int64_t remaining = std::max<std::int64_t>(0, budget - fixed);
  const std::int64_t seq_tokens_rank0 =
      dcp_rank_tokens(spec.scheduler.max_model_len, world, spec.dcp.interleave_size, 0);
  const std::int64_t blocks_per_seq = ceil_div(seq_tokens_rank0, spec.cache.block_size);
  std::int64_t num_blocks = 0;
  if (bytes_per_block > 0) {
    num_blocks = remaining / bytes_per_block;
    while (num_blocks > 0 && cache_bytes_for(num_blocks) > remaining) --num_blocks;
    if (num_blocks < blocks_per_seq) {
      const std::int64_t needed = cache_bytes_for(blocks_per_seq);
      const std::int64_t missing = fixed + needed - budget;
      FF_THROW(ErrorCode::kOutOfMemory, spec.where("cache.memory_budget"), ": the budget of ",
               format_bytes(budget), " (", budget, " bytes",
               budget_spec.bytes > 0 ? "" : " = " + fraction_text(budget_spec.fraction) +
                                                 " of " + format_bytes(device_bytes),
               ") cannot hold the weights (",
               format_bytes(plan.find("weights") ? plan.region("weights").bytes : 0),
               ") and the other fixed regions (",
               format_bytes(fixed - (plan.find("weights") ? plan.region("weights").bytes : 0)),
               ") plus one max-length sequence of KV cache (", spec.scheduler.max_model_len,
               " tokens = ", blocks_per_seq, " blocks of ", format_bytes(bytes_per_block), " = ",
               format_bytes(needed), "): ", missing, " bytes (", format_bytes(missing),
               ") are missing");
    }
  }
  plan.add_region("kv_cache", RegionKind::kKvCache, cache_bytes_for(num_blocks));
  std::map<int, std::int64_t> cache_offset, cache_size;
  std::int64_t at = 0;
  for (const CacheLayer& c : cache_layers) {
    const std::int64_t bytes = kv_cache_bytes(*c.backend, num_blocks, spec.cache.block_size,
                                              c.kv_heads, c.head_size, cache_dtype);
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
  kv.block_size = spec.cache.block_size;
  kv.bytes_per_block = bytes_per_block;
  kv.cache_layers = static_cast<int>(cache_layers.size());
  kv.tokens_per_rank = num_blocks * spec.cache.block_size;
  kv.dcp_world_size = world;
  kv.max_model_len = spec.scheduler.max_model_len;
  // Every rank has num_blocks blocks; a max-length sequence takes blocks_per_seq of them on
  // rank 0, the rank holding the most of its tokens.
  kv.max_concurrent_sequences = blocks_per_seq > 0 ? num_blocks / blocks_per_seq : 0;

  // Capture sizes off the default grid make padding cliffs (DESIGN.md, "CUDA graphs").
  if (spec.cuda_graphs.capture_sizes_explicit && !spec.cuda_graphs.capture_sizes.empty()) {
    const std::vector<int> grid = default_capture_sizes(spec.cuda_graphs.max_capture_size);
    std::string off;
    for (const int s : spec.cuda_graphs.capture_sizes) {
      if (!std::binary_search(grid.begin(), grid.end(), s)) (off += off.empty() ? "" : ", ") += std::to_string(s);
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
