#pragma once
// Engine: one deployment on one GPU, built from a spec (docs/DESIGN.md, "A step, from the serving
// loop to the logits").
//
// Construction plans the memory, makes the one arena, fills the built-in model's weights
// (deterministic random values, or with model.builtin_weights false the checkpoint's, checked
// whole against the model program before anything is allocated, then streamed up through a
// bounded pinned buffer), builds every layer's attention impl and one metadata builder
// per backend, and captures the spec's CUDA graphs, largest first. Then step(batch), once per
// serving-loop iteration: validate the batch, dispatch it (pad to a captured size or run
// eagerly), upload its inputs and metadata into their persistent buffers, replay (one launch
// for a full graph; pieces with eager attention between them for piecewise) and return the
// logits as a view into the plan's output buffer, and, when the engine samples, each request's
// next token, drawn inside the same graphs. After construction nothing is allocated.
//
// A tensor-parallel deployment is one Engine per rank (EngineOptions::communicator), each
// holding its shard of the weights, heads and KV cache; their steps give the same logits.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/core/tensor.h"
#include "freezeframe/engine/runtime/communicator.h"
#include "freezeframe/engine/runtime/step_batch.h"
#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/graphs/batch_descriptor.h"
#include "freezeframe/graphs/dispatcher.h"
#include "freezeframe/memory/memory_plan.h"

namespace freezeframe {

/// What a user's piece sees when it enqueues its work.
struct UserPieceContext {
  cudaStream_t stream = nullptr;
  int layer = 0;       ///< the layer it follows
  int num_tokens = 0;  ///< rows of this step, padding included
  TensorView hidden;   ///< the residual stream [num_tokens, hidden_size], read and write
};

/// Work a user adds to the model program at the end of layer `after_layer` (after its MLP,
/// before the next layer's attention): a callable that enqueues work on the given stream over
/// planned buffers. It is captured into the graphs like the built-in ops, so it must be
/// capturable: no allocation, no host synchronisation, launch shapes from num_tokens only.
struct UserPiece {
  std::string name;
  int after_layer = 0;
  std::function<void(const UserPieceContext&)> enqueue;
};

struct EngineOptions {
  /// Device memory the plan assumes; 0 = the current device's total memory.
  std::int64_t device_memory = 0;
  /// False: capture nothing, every step runs eagerly.
  bool capture_graphs = true;
  /// Seed of the built-in random weights (model.builtin_weights).
  std::uint64_t weight_seed = 0x5eed;
  /// Pinned host memory a checkpoint's weights are uploaded through, in two halves (the host
  /// converts rows into one while the GPU copies the other); a half holds at least one row.
  std::size_t weight_staging_bytes = std::size_t(64) << 20;
  /// Called while a checkpoint's weights upload, after each chunk, with the bytes enqueued so
  /// far and the total (e.g. to draw a progress bar).
  std::function<void(std::int64_t done, std::int64_t total)> weight_progress;
  std::vector<UserPiece> user_pieces;
  /// Draw each request's next token on the device after the LM head (sampler.h), inside the
  /// step's graphs, with the parameters of StepBatch::sampling; StepResult::token_ids then
  /// holds them. False: the steps end at the logits, as they always have.
  bool sample_tokens = false;
  /// Called after each captured graph with (done, total), e.g. to draw a progress bar.
  std::function<void(int done, int total)> capture_progress;
  /// With tp.world_size T > 1: this rank's communicator in a group of T (LocalGroup::rank(r)
  /// for T ranks on one GPU, or an NcclCommunicator), which must outlive the engine; the
  /// engine is tensor-parallel rank communicator->rank(). Every rank builds its engine and
  /// calls step() with the same batches, each from its own host thread, as the collectives
  /// of each step meet. Ranks sharing one GPU (a LocalGroup) each plan for the device_memory
  /// they are given: give each its share (a fractional cache.memory_budget is of that share).
  Communicator* communicator = nullptr;
  /// With dcp.world_size D > 1: this rank's communicator in its DCP group, the D consecutive
  /// tensor-parallel ranks tp_rank − tp_rank mod D ... (its rank is tp_rank mod D; with D = T
  /// the tensor-parallel group itself may serve). Decode and prefill rows run, eagerly and in
  /// every graph mode, where every layer's backend attends prefill rows over a DCP shard
  /// (AttentionBackend::supports_dcp_prefill); with one that does not, decode steps only.
  Communicator* dcp_communicator = nullptr;
};

/// One captured batch descriptor.
struct CapturedGraphInfo {
  BatchDescriptor descriptor;
  RuntimeMode mode = RuntimeMode::kFull;
  int graphs = 0;         ///< 1 for a full graph; pieces for piecewise; layers when layer by layer
  std::size_t nodes = 0;  ///< over its graphs
  double capture_ms = 0.0;        ///< recording the work into graphs
  double instantiate_ms = 0.0;    ///< making (and uploading) the executables
  std::int64_t device_bytes = 0;  ///< free device memory before minus after (2 MiB pages)
};

struct CaptureReport {
  std::vector<CapturedGraphInfo> captured;  ///< in capture order
  double warmup_ms = 0.0;  ///< eager runs of each size (a layer of each kind) before capture
  double total_ms = 0.0;   ///< the whole capture phase, warm-up included
  /// Device memory the warm-up took: code of kernels loaded on first use (lazy loading),
  /// which eager steps of these sizes would load as well.
  std::int64_t warmup_device_bytes = 0;
  /// Device memory the graphs took: free memory after warm-up minus after capture.
  std::int64_t graph_device_bytes = 0;
  /// Non-empty when a capture failed: the error; the engine then runs every step eagerly.
  std::string failure;
  /// Why piecewise graphs found executables of their sharing group that would not take them
  /// (CUDA's reason and node, with counts): each refusal is a graph of another shape.
  std::map<std::string, int> refused_updates;
};

struct StepOptions {
  /// Run eagerly, with the batch exactly as it is (no padding).
  bool eager = false;
  /// Run eagerly, padded exactly as the graph the dispatcher picks would run it: the same
  /// kernels on the same shapes, so the logits must equal the replay's bit for bit.
  bool eager_like_graph = false;
  /// Dispatch as if the batch were not a uniform decode, so full_and_piecewise runs it in
  /// pieces (benchmarks compare the two modes on the same batch).
  bool prefer_piecewise = false;
};

/// Host time of one step() call, by phase (microseconds).
struct StepHostTimes {
  double validate_us = 0.0;  ///< checking the batch against the spec, dispatching
  double upload_us = 0.0;    ///< staging and enqueueing the inputs and metadata copies
  double launch_us = 0.0;    ///< enqueueing the graphs (or the eager kernels)
};

/// The device time of one op of the model program, from profile_ops.
struct OpTime {
  std::string name;  ///< the op's kind ("qkv_proj", "attention", ...) or the user piece's name
  int layer = -1;
  double ms = 0.0;
};

struct StepResult {
  /// [num_reqs, vocab_size] f32 logits of each request's last new token, a view into the
  /// plan's output buffer: valid once the engine's stream has reached it, until the next step.
  TensorView logits;
  /// With EngineOptions::sample_tokens: [num_reqs] int32, the token drawn for each request, a
  /// view into the plan's output buffer; undefined otherwise. Valid as the logits are.
  TensorView token_ids;
  /// The same tokens in pinned host memory, copied by the step itself: readable once the
  /// engine's stream has reached the step (after synchronize()), until the next step.
  std::span<const std::int32_t> host_token_ids;
  RuntimeMode mode = RuntimeMode::kEager;
  BatchDescriptor descriptor;  ///< the padded shape that ran (eager: the batch's own)
  StepHostTimes host;
};

class Engine {
 public:
  /// Builds everything; throws (kInvalidArgument, kUnsupported, kOutOfMemory, kCudaError)
  /// naming the spec field or the failing call, leaving nothing allocated. A capture that fails
  /// does not throw: the report says why and the engine runs eagerly.
  explicit Engine(EngineSpec spec, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Enqueues one step on stream(). Throws kInvalidArgument before launching anything when the
  /// batch breaks the spec's limits (validate_step), or carries sampling parameters for an
  /// engine that does not sample, leaving every buffer as it was.
  StepResult step(const StepBatch& batch, const StepOptions& options = {});
  /// Waits for every step enqueued so far (so the next step need not ask whether its
  /// staging buffer is free).
  void synchronize() const;
  /// Runs `batch` eagerly with a CUDA event between every two ops and returns each op's device
  /// time, in program order: a profile without a profiler (the events add a little time).
  /// Synchronises; creates its events, so it is not for the steady state.
  [[nodiscard]] std::vector<OpTime> profile_ops(const StepBatch& batch);

  [[nodiscard]] const EngineSpec& spec() const;
  /// Whether steps draw tokens (EngineOptions::sample_tokens).
  [[nodiscard]] bool samples() const;
  [[nodiscard]] const MemoryPlan& plan() const;
  [[nodiscard]] const CaptureReport& capture_report() const;
  [[nodiscard]] const Dispatcher& dispatcher() const;
  /// The deployment's geometry: limits (with the plan's KV blocks), KV geometry, rank view.
  [[nodiscard]] const DeploymentGeometry& geometry() const;
  [[nodiscard]] const DeploymentLimits& limits() const;
  [[nodiscard]] cudaStream_t stream() const;
  /// Graphs held (pieces and layers counted one by one).
  [[nodiscard]] int num_graphs() const;
  /// CUDA executables behind them: fewer than graphs where piecewise graphs share one
  /// (cuda_graphs.share_piecewise_executables: by batch size, optionally by layer too).
  [[nodiscard]] int num_executables() const;
  /// The KV cache of `layer` in its backend's shape (layers sharing a cache see the same).
  [[nodiscard]] TensorView kv_cache(int layer) const;
  /// The planned weight called `name` in the model program ("embed_tokens",
  /// "layers.0.self_attn.q_proj"), in its shape on the device; throws kNotFound.
  [[nodiscard]] TensorView weight(std::string_view name) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace freezeframe
