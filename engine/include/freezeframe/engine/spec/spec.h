#pragma once
// EngineSpec: one deployment, as read from a YAML spec (docs/spec.md documents every field and
// its default). load_spec / parse_spec validate everything they can without a device and
// report all problems at once, each with file:line:column and the field's path.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/backends/attention_type.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/base/dtype.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/graphs/capture_sizes.h"
#include "freezeframe/graphs/graph_mode.h"

namespace freezeframe {

/// Where a value came from in the spec file (1-based line and column; 0 when unknown).
struct SpecLocation {
  std::string file;
  int line = 0;
  int column = 0;
};

/// The MLP of a decoder layer.
enum class MlpKind {
  kGatedSilu,  ///< gate/up projection, SiLU(gate)·up, down projection (Llama, Qwen, Mistral)
  kNone,       ///< no MLP in the built-in model
  /// A mixture of gated-SiLU experts (model.moe): planned whole, not yet run by the engine.
  kMoe,
};

/// A mixture of experts (DeepSeek-V2's MoE layers): a router picks experts_per_token of
/// num_experts gated-SiLU experts, each intermediate_size wide, for every token, their outputs
/// weighed by the router; num_shared_experts more run on every token (as one MLP
/// num_shared_experts · intermediate_size wide).
struct MoeSpec {
  int num_experts = 0;
  int experts_per_token = 0;
  int intermediate_size = 0;
  int num_shared_experts = 0;
  /// How the router weighs the experts it picks (a checkpoint's; a spec alone gets the
  /// softmax's top k among all, unscaled): the top k among the best top_groups of num_groups
  /// groups, each weight times routed_scaling_factor.
  float routed_scaling_factor = 1.0f;
  int num_groups = 1;
  int top_groups = 1;
};

/// Multi-head latent attention dimensions (DeepSeek-V2/V3).
struct MlaSpec {
  int kv_lora_rank = 0;
  int q_lora_rank = 0;  ///< 0: no query compression, q_proj reads the normed hidden state
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
};

/// One layer's attention and MLP, after defaults and per-layer overrides are applied.
struct LayerSpec {
  AttentionType attention_type = AttentionType::kDecoder;
  std::string backend = "reference";
  int sliding_window = 0;        ///< tokens; 0 = full attention
  float logits_soft_cap = 0.0f;  ///< 0 = off
  bool alibi = false;
  int kv_sharing_target = -1;  ///< ≥ 0: reuse that (earlier) layer's KV cache
  MlpKind mlp = MlpKind::kGatedSilu;
  int intermediate_size = 0;

  bool operator==(const LayerSpec&) const = default;
};

struct ModelSpec {
  std::string name;
  int num_layers = 0;
  int hidden_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  ///< defaults to num_heads
  int head_size = 0;     ///< defaults to hidden_size / num_heads
  int intermediate_size = 0;
  int vocab_size = 0;
  bool tie_word_embeddings = false;
  DType dtype = DType::kBF16;
  /// model.residual_dtype: the residual stream's dtype when it is not the model's (f32, so
  /// the sums of the layers' outputs are not rounded to 16 bits at every layer).
  std::optional<DType> residual;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  std::int64_t max_position_embeddings = 0;
  bool builtin_weights = true;  ///< plan the weights of the built-in model
  /// model.quantization: fp8 keeps the attention and MLP projections' weights in fp8 e4m3
  /// with a scale per output channel, and quantises their inputs per token (W8A8); the
  /// embedding, norms and LM head stay in `dtype`.
  bool fp8_linear = false;
  /// model.checkpoint, read: the sizes above came from it, and it keeps what the model program
  /// will need beyond them (RoPE scaling, QKV bias) and where the weights are (its path,
  /// resolved against the spec's folder).
  std::optional<CheckpointConfig> checkpoint;
  std::optional<MlaSpec> mla;     ///< present: every layer is MLA
  std::optional<MoeSpec> moe;     ///< the experts of the layers whose mlp is moe
  std::vector<LayerSpec> layers;  ///< one per layer, defaults and overrides resolved

  [[nodiscard]] bool is_mla() const { return mla.has_value(); }
  /// The residual stream's dtype with "auto" resolved.
  [[nodiscard]] DType residual_dtype() const { return residual.value_or(dtype); }
};

/// The budget for the whole arena: a fraction of device memory or a number of bytes.
struct MemoryBudget {
  double fraction = 0.9;   ///< used when bytes == 0
  std::int64_t bytes = 0;  ///< > 0: absolute budget

  /// Bytes the arena may use on a device with `device_bytes` of memory.
  [[nodiscard]] std::int64_t resolve(std::int64_t device_bytes) const;
};

struct CacheSpec {
  int block_size = 16;         ///< tokens per KV block
  std::optional<DType> dtype;  ///< empty = "auto": the model dtype
  MemoryBudget memory_budget;
};

struct SchedulerSpec {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  std::int64_t max_model_len = 0;  ///< defaults to max_position_embeddings
  /// Σ context of the prefills of one step, for workspaces that expand it (MLA prefill);
  /// 0 = max(max_num_batched_tokens, max_model_len).
  std::int64_t max_prefill_context_tokens = 0;
};

/// Which piecewise graphs share a CUDA executable (each costs device memory; launching a graph
/// its executable does not hold updates the executable first).
enum class PiecewiseSharing {
  kNone,          ///< one executable per graph
  kAcrossSizes,   ///< piece k of every batch size
  kAcrossLayers,  ///< also every piece with the same ops, such as a decoder's middle pieces
};

struct CudaGraphSpec {
  CudaGraphMode mode = CudaGraphMode::kFullAndPiecewise;
  std::vector<int> capture_sizes;  ///< resolved: explicit, or the default ladder (ascending)
  bool capture_sizes_explicit = false;
  int max_capture_size = 0;  ///< resolved largest size (0 when mode is none)
  /// Profiling: full graphs as one graph per layer, each replayed inside its own NVTX range
  /// (ranges inside one captured graph are not replayed).
  bool layer_by_layer = false;
  /// cuda_graphs.share_piecewise_executables: across_sizes (also true), across_layers, or
  /// none (also false).
  PiecewiseSharing piecewise_sharing = PiecewiseSharing::kAcrossSizes;
};

/// Tensor parallelism: heads, the MLP's intermediate columns and the vocabulary split over
/// world_size ranks (docs/DESIGN.md, "Tensor parallelism").
struct TpSpec {
  int world_size = 1;
};

/// Decode context parallelism: each sequence's KV cache sharded by token over world_size of the
/// tensor-parallel ranks, interleave_size tokens at a time.
struct DcpSpec {
  int world_size = 1;
  int interleave_size = 1;
};

struct EngineSpec {
  ModelSpec model;
  CacheSpec cache;
  SchedulerSpec scheduler;
  CudaGraphSpec cuda_graphs;
  TpSpec tp;
  DcpSpec dcp;
  /// Where each field was written ("cache.memory_budget" → file:line:column), so later checks
  /// (the memory plan) can point at the spec too.
  std::map<std::string, SpecLocation, std::less<>> locations;
  std::string source;  ///< the file name (or "<string>")
  /// The registry the spec was validated against; the planner and the engine find the
  /// layers' backends there too. Not owned: it must outlive the spec.
  const BackendRegistry* registry = &BackendRegistry::global();

  /// The backend of layer `layer`, from `registry`.
  [[nodiscard]] const AttentionBackend& backend(int layer) const {
    return registry->get(model.layers.at(layer).backend);
  }
  /// The cache dtype with "auto" resolved.
  [[nodiscard]] DType kv_cache_dtype() const { return cache.dtype.value_or(model.dtype); }
  /// "file:line:column: path" for messages about `path`: the closest located field at or above
  /// it, a location with no line names its origin (e.g. "--budget 0.5: path"), else "file: path".
  [[nodiscard]] std::string where(std::string_view path) const;
};

/// Reads and validates a spec file; backend names are looked up in `registry`. Throws
/// kInvalidArgument listing the problems found, each as "file:line:column: path: message"
/// (also for a file that is not a regular file or is over 1 MiB); kNotFound when the file
/// cannot be read.
[[nodiscard]] EngineSpec load_spec(const std::string& path,
                                   const BackendRegistry& registry = BackendRegistry::global());
/// The same from text; `source_name` stands for the file name in messages.
[[nodiscard]] EngineSpec parse_spec(std::string_view yaml,
                                    std::string_view source_name = "<string>",
                                    const BackendRegistry& registry = BackendRegistry::global());
/// The same for a spec a program wrote for the checkpoint `checkpoint` (spec_for_checkpoint, a
/// tool's): its lines and columns are of text no one saw, so its problems name the field only,
/// and the checkpoint's own as its reader states them ("x.gguf: metadata 'llama.block_count':
/// 100000 is outside [1, 4096], the range of model.num_layers").
[[nodiscard]] EngineSpec parse_written_spec(
    std::string_view yaml, std::string_view checkpoint,
    const BackendRegistry& registry = BackendRegistry::global());

/// The tensor- and decode-context-parallel world sizes a spec file names (1 where a section is
/// absent), read without validating the rest and without touching a device (load_spec makes
/// the backends' impls, which ask for the GPU): for a process that must settle its CUDA
/// settings before its first CUDA call. Nothing when the file or these fields cannot be read;
/// load_spec then says why.
struct ParallelSizes {
  int tp = 1;
  int dcp = 1;
};
[[nodiscard]] std::optional<ParallelSizes> read_parallel_sizes(const std::string& path);

}  // namespace freezeframe
