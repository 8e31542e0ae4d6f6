#pragma once
// ModelRunner: executes the model program's ops (plus the user's pieces) on a stream over the
// plan's views. It owns each layer's attention impl; the engine decides which ops run inside
// graphs and which eagerly, and hands in the step's device metadata.
//
// Every op's launch shape follows RunShape only (the padded row and request counts), never
// the step's data, so a run recorded into a graph is right for any batch of that shape.
//
// The attention forward writes the new keys and values into the cache itself (the program's
// cache_write op enqueues nothing), so in piecewise mode the cache write runs eagerly with the
// attention it feeds, on the same metadata.

#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "freezeframe/backends/attention_impl.h"
#include "freezeframe/backends/attention_layer.h"
#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/plan/plan_views.h"
#include "freezeframe/engine/runtime/communicator.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/engine/spec/tensor_parallel.h"
#include "freezeframe/memory/arena.h"
#include "runtime/gemm.h"

namespace freezeframe {

/// The padded shape one run covers.
struct RunShape {
  int rows = 0;  ///< token rows (padding included)
  int reqs = 0;  ///< requests (padded ones included); the LM head's rows
};

class ModelRunner {
 public:
  /// `backend_of_layer[l]`: which of the metadata pointers run() gets (one per backend) layer
  /// l's attention reads. Without `sample_tokens` the program's sample op is left out.
  /// `communicator`: the tensor-parallel group of geometry.rank (null for one rank), whose
  /// collectives the program's all_reduce and gather_logits ops run; `dcp_communicator`: its
  /// DCP group (null without DCP), for dcp_gather_queries and dcp_merge.
  ModelRunner(const EngineSpec& spec, const DeploymentGeometry& geometry,
              const ModelProgram& program, const PlanViews& views, const Arena& arena,
              std::vector<int> backend_of_layer, std::vector<UserPiece> user_pieces,
              bool sample_tokens, Communicator* communicator,
              Communicator* dcp_communicator = nullptr);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  /// Ops to run in order: the program's, with the user's pieces inserted.
  [[nodiscard]] int num_ops() const { return static_cast<int>(ops_.size()); }
  [[nodiscard]] bool is_attention(int op) const;
  /// Whether the op runs a collective that no graph may capture (Communicator::capturable):
  /// graphs end before it and start after it, and it runs eagerly between them.
  [[nodiscard]] bool runs_between_graphs(int op) const;
  /// The layer an op belongs to (−1 before the first layer and after the last).
  [[nodiscard]] int layer_of(int op) const { return ops_[op].layer; }
  /// The op's kind ("qkv_proj", ...) or the user piece's name.
  [[nodiscard]] std::string op_name(int op) const;

  /// Fills every weight with deterministic random values (scaled by fan-in; biases zero) on
  /// `stream`: this rank's shard of the values one rank would hold, so every deployment of a
  /// seed computes the same model.
  void init_weights(std::uint64_t seed, cudaStream_t stream);

  /// Gives each layer's attention the fp8 KV cache scales of the checkpoint (one per layer),
  /// before any step writes the cache or is captured.
  void set_kv_cache_scales(std::span<const KvCacheScales> scales);

  /// The tokens the last run's sample op drew, copied to pinned host memory by the same run
  /// (the first `reqs`): valid once the stream has run it.
  [[nodiscard]] std::span<const std::int32_t> host_token_ids(int reqs) const {
    return {static_cast<const std::int32_t*>(host_tokens_.data()), static_cast<std::size_t>(reqs)};
  }

  /// Enqueues ops [begin, end) for `shape`. `metadata[b]` is the device metadata of backend b
  /// for this step. Attention ops are wrapped in NVTX ranges when `ranges` is set (they are
  /// pointless inside a capture).
  void run(int begin, int end, const RunShape& shape,
           std::span<const AttentionMetadata* const> metadata, cudaStream_t stream, bool ranges);

 private:
  struct Op {
    int program_op = -1;  ///< index into the program's ops; −1 for a user piece
    int user_piece = -1;
    int layer = -1;
  };
  struct Layer;

  void run_op(const Op& op, const RunShape& shape,
              std::span<const AttentionMetadata* const> metadata, cudaStream_t stream, bool ranges);
  void attention(const ProgramOp& op, const RunShape& shape, const AttentionMetadata& md,
                 cudaStream_t stream, bool ranges);
  void mla_attention(const ProgramOp& op, const RunShape& shape, const AttentionMetadata& md,
                     cudaStream_t stream, bool ranges);
  /// The logits: every rank's shard of the LM head's rows, gathered rank-major into
  /// `gathered`, then copied side by side without the vocabulary's padding.
  void gather_logits(const ops::GatherLogits& op, int reqs, cudaStream_t stream);
  /// DCP: this rank's queries all-gathered over its group into q_group (rank-major heads).
  void dcp_gather_queries(const ops::DcpGatherQueries& op, int rows, cudaStream_t stream);
  /// DCP: each rank's heads of the group's partial outputs and LSEs sent to it (two
  /// all-to-alls) and merged by their LSEs into attn_out.
  void dcp_merge(const ops::DcpMerge& op, int rows, cudaStream_t stream);
  /// out = in · Wᵀ (the weights stacked).
  void project(const ops::Projection& p, int rows, cudaStream_t stream);
  /// A MoE layer's routed experts (moe_kernels.h): route, sort, gate_up, SiLU·mul, down,
  /// combine.
  void experts(const ops::MoeExperts& m, const Layer& layer, int rows, cudaStream_t stream);
  /// hidden += in · Wᵀ.
  void add_projection(const ops::ResidualProjection& p, int rows, cudaStream_t stream);
  /// x · Wᵀ for the weights `weights` (stacked along the output dimension, fused into one GEMM
  /// when they lie back to back) into `y`; beta 1 adds to y. With `fp8` scales, x and the
  /// weights are fp8 and the GEMMs scale by them (W8A8).
  void linear(const TensorView& x, std::span<const int> weights, const TensorView& y, int rows,
              float beta, const ops::Fp8Scales& fp8, cudaStream_t stream);
  /// Whether the weights lie back to back in the weights region, in this order.
  [[nodiscard]] bool back_to_back(std::span<const int> weights) const;
  [[nodiscard]] TensorView rows_of(int tensor, int rows) const;

  const EngineSpec& spec_;
  const TpShard shard_;  // this rank's heads and vocabulary rows
  const int tp_rank_;
  const int dcp_size_;
  Communicator* communicator_;      // null for one rank
  Communicator* dcp_communicator_;  // null without DCP
  const ModelProgram& program_;
  const PlanViews& views_;
  std::vector<Op> ops_;
  std::vector<UserPiece> user_pieces_;
  std::vector<int> backend_of_layer_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Gemm> gemm_;
  PinnedBuffer host_tokens_;  // the sample op's tokens, max_num_seqs of them
  int token_ids_ = -1, positions_ = -1, hidden_ = -1;
  std::vector<float> rope_inv_freq_;  ///< one per rotary pair of a head (rope_inv_frequencies)
};

}  // namespace freezeframe
