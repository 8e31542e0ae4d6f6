#include "runtime/model_runner.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "freezeframe/backends/lse_merge.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/nvtx.h"
#include "freezeframe/engine/spec/layer_params.h"
#include "model/rope_frequencies.h"
#include "runtime/model_kernels.h"
#include "runtime/sampler_kernel.h"

namespace freezeframe {

using E = ErrorCode;

/// One layer's attention: its impl (exactly one of the two), the per-layer state its forward
/// runs with, its cache and the NVTX range name of its forward.
struct ModelRunner::Layer {
  std::unique_ptr<AttentionImpl> impl;
  std::unique_ptr<MlaImpl> mla;
  AttentionLayer state;
  TensorView kv_cache;
  std::string range;
  std::string all_reduce_range;  ///< "all_reduce[layer=i]": the tensor-parallel sums' range
  std::string dcp_gather_range;  ///< "dcp_gather[layer=i]": the group's queries gathered
  std::string dcp_merge_range;   ///< "dcp_merge[layer=i]": the partial outputs merged
  bool rope = true;              ///< ALiBi layers have no rotary embedding
};

ModelRunner::ModelRunner(const EngineSpec& spec, const DeploymentGeometry& geometry,
                         const ModelProgram& program, const PlanViews& views, const Arena& arena,
                         std::vector<int> backend_of_layer, std::vector<UserPiece> user_pieces,
                         bool sample_tokens, Communicator* communicator,
                         Communicator* dcp_communicator)
    : spec_(spec),
      shard_(tp_shard(spec)),
      tp_rank_(geometry.rank.tp_rank),
      dcp_size_(geometry.rank.dcp_world_size),
      communicator_(communicator),
      dcp_communicator_(dcp_communicator),
      program_(program),
      views_(views),
      user_pieces_(std::move(user_pieces)),
      backend_of_layer_(std::move(backend_of_layer)) {
  const ModelSpec& model = spec.model;
  FF_CHECK(shard_.world == 1 ||
               (communicator_ != nullptr && communicator_->world_size() == shard_.world &&
                communicator_->rank() == tp_rank_),
           E::kInternal, "tensor-parallel rank ", tp_rank_, " of ", shard_.world,
           " needs its group's communicator");
  FF_CHECK(dcp_size_ == 1 ||
               (dcp_communicator_ != nullptr && dcp_communicator_->world_size() == dcp_size_ &&
                dcp_communicator_->rank() == geometry.rank.dcp_rank),
           E::kInternal, "DCP rank ", geometry.rank.dcp_rank, " of ", dcp_size_,
           " needs its group's communicator");
  token_ids_ = program.tensor_index("token_ids");
  positions_ = program.tensor_index("positions");
  hidden_ = program.tensor_index("hidden");
  // Once, with the checkpoint's RoPE scaling; MLA attention rotates inside its own impl.
  if (!model.is_mla()) rope_inv_freq_ = rope_inv_frequencies(model);

  // Ops: the program's, each user piece after the last op of its layer.
  for (std::size_t p = 0; p < user_pieces_.size(); ++p) {
    const UserPiece& piece = user_pieces_[p];
    FF_CHECK(piece.after_layer >= 0 && piece.after_layer < model.num_layers, E::kInvalidArgument,
             "user piece '", piece.name, "': after_layer ", piece.after_layer,
             " is not a layer of the model (0 to ", model.num_layers - 1, ")");
    FF_CHECK(static_cast<bool>(piece.enqueue), E::kInvalidArgument, "user piece '", piece.name,
             "' has nothing to enqueue");
  }
  for (int i = 0; i < static_cast<int>(program.ops.size()); ++i) {
    const int layer = program.ops[i].layer;
    if (program.ops[i].kind == OpKind::kSample && !sample_tokens) continue;
    ops_.push_back({i, -1, layer});
    const bool last_of_layer = layer >= 0 && (i + 1 == static_cast<int>(program.ops.size()) ||
                                              program.ops[i + 1].layer != layer);
    if (!last_of_layer) continue;
    for (std::size_t p = 0; p < user_pieces_.size(); ++p) {
      if (user_pieces_[p].after_layer == layer) ops_.push_back({-1, static_cast<int>(p), layer});
    }
  }

  // Attention impls. Every layer shares the one attention workspace: layers run in turn.
  const TensorView workspace = arena.plan().find("attention_workspace") != nullptr
                                   ? arena.view("attention_workspace", DType::kU8,
                                                {arena.plan().region("attention_workspace").bytes})
                                   : TensorView();
  const DcpGroup dcp{geometry.rank.dcp_world_size, geometry.rank.dcp_rank,
                     geometry.rank.dcp_interleave_size};
  for (int l = 0; l < model.num_layers; ++l) {
    auto layer = std::make_unique<Layer>();
    const LayerSpec& layer_spec = model.layers[l];
    const AttentionBackend& backend = spec.backend(l);
    layer->state.name = "layers." + std::to_string(l);
    layer->state.workspace = workspace;
    layer->kv_cache = views.kv_caches[l];
    layer->range = "attention[layer=" + std::to_string(l) + ",backend=" + layer_spec.backend + "]";
    layer->all_reduce_range = "all_reduce[layer=" + std::to_string(l) + "]";
    layer->dcp_gather_range = "dcp_gather[layer=" + std::to_string(l) + "]";
    layer->dcp_merge_range = "dcp_merge[layer=" + std::to_string(l) + "]";
    layer->rope = !layer_spec.alibi;
    if (model.is_mla()) {
      const std::string pre = layer->state.name + ".self_attn.";
      auto weight = [&](const std::string& suffix) -> const TensorView& {
        for (std::size_t w = 0; w < program.weights.size(); ++w) {
          if (program.weights[w].name == pre + suffix) return views.weights[w];
        }
        FF_THROW(E::kNotFound, "the model program has no weight ", pre, suffix);
      };
      MlaWeights weights;
      weights.q_proj = weight(model.mla->q_lora_rank > 0 ? "q_b_proj" : "q_proj");
      weights.kv_b_proj = weight("kv_b_proj");
      layer->mla = backend.make_mla_impl(mla_params(spec), weights, dcp);
    } else {
      layer->impl = backend.make_impl(attention_params(spec, l, tp_rank_), dcp);
    }
    layers_.push_back(std::move(layer));
  }

  const MemoryRegion& cublas = arena.plan().region("cublas_workspace");
  gemm_ = std::make_unique<Gemm>(arena.view("cublas_workspace", DType::kU8, {cublas.bytes}));
  if (sample_tokens) {
    host_tokens_ =
        PinnedBuffer(sizeof(std::int32_t) * static_cast<std::size_t>(spec.scheduler.max_num_seqs));
  }
}

ModelRunner::~ModelRunner() = default;

bool ModelRunner::is_attention(int op) const {
  const Op& o = ops_[op];
  if (o.program_op < 0) return false;
  const OpKind kind = program_.ops[o.program_op].kind;
  return kind == OpKind::kAttention || kind == OpKind::kMlaAttention;
}

bool ModelRunner::runs_between_graphs(int op) const {
  const Op& o = ops_[op];
  if (o.program_op < 0) return false;
  const auto uncapturable = [](const Communicator* c) { return c != nullptr && !c->capturable(); };
  switch (program_.ops[o.program_op].kind) {
    case OpKind::kAllReduce:
    case OpKind::kGatherLogits: return uncapturable(communicator_);
    case OpKind::kDcpGatherQueries:
    case OpKind::kDcpMerge: return uncapturable(dcp_communicator_);
    default: return false;
  }
}

std::string ModelRunner::op_name(int op) const {
  const Op& o = ops_[op];
  if (o.program_op < 0) return user_pieces_[o.user_piece].name;
  return std::string(to_string(program_.ops[o.program_op].kind));
}

void ModelRunner::init_weights(std::uint64_t seed, cudaStream_t stream) {
  for (std::size_t w = 0; w < program_.weights.size(); ++w) {
    const ProgramWeight& weight = program_.weights[w];
    const TensorView& view = views_.weights[w];
    if (!view.defined()) continue;
    // Matrices: uniform(±1/√fan_in) keeps activations O(1) through the layers (PyTorch's
    // Linear default); vectors are norm scales near 1. The embedding is a matrix too, so the
    // residual stream starts near ±1/√hidden and the norms rescale it.
    // A rank fills its block of the whole weight with the whole weight's values.
    const bool matrix = weight.shape.size() == 2;
    const bool bias = weight.name.ends_with(".bias");
    const WeightShard part = weight_shard(spec_, weight.name, tp_rank_);
    const std::int64_t cols = weight.shape.back();
    const std::int64_t fan_in = matrix ? (part.axis == 1 ? part.whole : cols) : 1;
    const float bound = matrix ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f;
    // Biases start at zero: a random model with them computes what it did without.
    const float lo = matrix ? -bound : (bias ? 0.0f : 0.8f);
    const float hi = matrix ? bound : (bias ? 0.0f : 1.2f);
    // A vector's one row is its columns: its shard along axis 0 is a range of them.
    const bool by_columns = part.axis == 1 || (part.axis == 0 && !matrix);
    const std::int64_t whole_cols = by_columns ? part.whole : cols;
    const std::int64_t first_row = part.axis == 0 && matrix ? part.offset : 0;
    const std::int64_t first_col = by_columns ? part.offset : 0;
    model_kernels::fill_uniform_block(view, seed + w, lo, hi, whole_cols, first_row, first_col,
                                      stream);
  }
}

TensorView ModelRunner::rows_of(int tensor, int rows) const {
  const TensorView& t = views_.tensors[tensor];
  const std::int64_t shape[] = {rows, t.size(1)};
  const std::int64_t strides[] = {t.stride(0), 1};
  return TensorView::strided(t.data(), t.dtype(), shape, strides, t.device());
}

void ModelRunner::linear(const TensorView& x, std::span<const int> weights, const TensorView& y,
                         int rows, float beta, cudaStream_t stream) {
  // Weights packed back to back form one [Σ N, K] matrix: one GEMM instead of several.
  bool adjacent = true;
  std::int64_t n_total = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const TensorView& w = views_.weights[weights[i]];
    if (i > 0) {
      const TensorView& prev = views_.weights[weights[i - 1]];
      adjacent = adjacent && static_cast<const std::byte*>(prev.data()) + prev.span_bytes() ==
                                 static_cast<const std::byte*>(w.data());
    }
    n_total += w.size(0);
  }
  const TensorView& first = views_.weights[weights[0]];
  if (adjacent) {
    const std::int64_t shape[] = {n_total, first.size(1)};
    const TensorView fused(first.data(), first.dtype(), shape, first.device());
    gemm_->linear(x, fused, y, rows, beta, stream);
    return;
  }
  std::int64_t column = 0;
  for (const int w : weights) {
    const TensorView& weight = views_.weights[w];
    const std::int64_t shape[] = {y.size(0), weight.size(0)};
    const std::int64_t strides[] = {y.stride(0), 1};
    const TensorView slice = TensorView::strided(
        static_cast<std::byte*>(y.data()) + column * static_cast<std::int64_t>(size_of(y.dtype())),
        y.dtype(), shape, strides, y.device());
    gemm_->linear(x, weight, slice, rows, beta, stream);
    column += weight.size(0);
  }
}

void ModelRunner::run(int begin, int end, const RunShape& shape,
                      std::span<const AttentionMetadata* const> metadata, cudaStream_t stream,
                      bool ranges) {
  FF_CHECK(begin >= 0 && begin <= end && end <= num_ops(), E::kInternal, "ops [", begin, ", ", end,
           ") outside [0, ", num_ops(), ")");
  for (int i = begin; i < end; ++i) run_op(ops_[i], shape, metadata, stream, ranges);
}

void ModelRunner::run_op(const Op& o, const RunShape& shape,
                         std::span<const AttentionMetadata* const> metadata, cudaStream_t stream,
                         bool ranges) {
  const int rows = shape.rows;
  if (o.program_op < 0) {
    const UserPiece& piece = user_pieces_[o.user_piece];
    UserPieceContext context;
    context.stream = stream;
    context.layer = o.layer;
    context.num_tokens = rows;
    context.hidden = rows_of(hidden_, rows);
    piece.enqueue(context);
    return;
  }
  const ProgramOp& op = program_.ops[o.program_op];
  const ModelSpec& model = spec_.model;
  const float eps = model.rms_norm_eps;
  auto tensor = [&](int t) { return rows_of(t, rows); };
  auto weight = [&](int i) -> const TensorView& { return views_.weights[op.weights[i]]; };
  // Only attention reads metadata: the ops around the layers have inputs of their own.
  const AttentionMetadata* md = op.layer >= 0 ? metadata[backend_of_layer_[op.layer]] : nullptr;

  switch (op.kind) {
    case OpKind::kEmbedding:
      model_kernels::embedding(weight(0), views_.tensors[token_ids_].data_as<const std::int32_t>(),
                               rows, tensor(op.writes[0]), stream,
                               std::int64_t(tp_rank_) * shard_.vocab_rows);
      return;
    case OpKind::kRmsNorm:
      model_kernels::rms_norm(tensor(op.reads[0]), weight(0), eps, tensor(op.writes[0]), rows,
                              stream);
      return;
    case OpKind::kQkvProj:
    case OpKind::kGateUpProj:
    case OpKind::kMlaKvAProj:
      linear(tensor(op.reads[0]), op.weights, tensor(op.writes[0]), rows, 0.0f, stream);
      return;
    case OpKind::kQkvBias: {
      // Each bias onto its columns of qkv: the q heads', then k's, then v's.
      const TensorView qkv = tensor(op.writes[0]);
      const auto elem = static_cast<std::int64_t>(size_of(qkv.dtype()));
      std::int64_t column = 0;
      for (std::size_t i = 0; i < op.weights.size(); ++i) {
        const TensorView& bias = weight(static_cast<int>(i));
        const std::int64_t cols_shape[] = {qkv.size(0), bias.size(0)};
        const std::int64_t strides[] = {qkv.stride(0), 1};
        const TensorView cols =
            TensorView::strided(static_cast<std::byte*>(qkv.data()) + column * elem, qkv.dtype(),
                                cols_shape, strides, qkv.device());
        model_kernels::add_bias(cols, bias, rows, stream);
        column += bias.size(0);
      }
      return;
    }
    case OpKind::kRope:
      if (!layers_[op.layer]->rope) return;
      model_kernels::rope_neox(tensor(op.writes[0]),
                               views_.tensors[positions_].data_as<const std::int64_t>(), rows,
                               shard_.query_heads, shard_.kv_heads, model.head_size,
                               model.head_size, rope_inv_freq_, stream);
      return;
    case OpKind::kCacheWrite:
      return;  // the attention forward writes the cache (see model_runner.h)
    case OpKind::kAttention: attention(op, shape, *md, stream, ranges); return;
    case OpKind::kOProjResidual:
    case OpKind::kDownProjResidual:
      // hidden += x · Wᵀ: the GEMM accumulates into the residual stream (beta = 1). Over T
      // ranks each writes its partial sum, rank 0 with the residual, and all_reduce adds them.
      linear(tensor(op.reads[0]), op.weights, tensor(hidden_), rows, tp_rank_ == 0 ? 1.0f : 0.0f,
             stream);
      return;
    case OpKind::kAllReduce: {
      std::optional<NvtxRange> range;  // eager steps only: pointless inside a capture
      if (ranges) {
        range.emplace(op.layer < 0 ? "all_reduce[embedding]"
                                   : layers_[op.layer]->all_reduce_range.c_str());
      }
      const TensorView hidden = views_.tensors[hidden_];
      communicator_->all_reduce(hidden.data(), hidden.data(),
                                static_cast<std::size_t>(rows) * hidden.size(1), hidden.dtype(),
                                stream);
      return;
    }
    case OpKind::kGatherLogits: {
      std::optional<NvtxRange> range;
      if (ranges) range.emplace("gather_logits");
      gather_logits(op, shape.reqs, stream);
      return;
    }
    case OpKind::kSiluAndMul:
      model_kernels::silu_and_mul(tensor(op.reads[0]), tensor(op.writes[0]), rows, stream);
      return;
    case OpKind::kMlaQProj: {
      // q_a = x · W_q_aᵀ, then its layernorm (in place).
      const int gemm_weights[] = {op.weights[0]};
      linear(tensor(op.reads[0]), gemm_weights, tensor(op.writes[0]), rows, 0.0f, stream);
      model_kernels::rms_norm(tensor(op.writes[0]), weight(1), eps, tensor(op.writes[0]), rows,
                              stream);
      return;
    }
    case OpKind::kMlaKvANorm: {
      // The first kv_lora_rank columns of kv_a (the rest are k_pe).
      const TensorView kv_a = tensor(op.reads[0]);
      const std::int64_t shape_latent[] = {rows, model.mla->kv_lora_rank};
      const std::int64_t strides[] = {kv_a.stride(0), 1};
      model_kernels::rms_norm(
          TensorView::strided(kv_a.data(), kv_a.dtype(), shape_latent, strides, kv_a.device()),
          weight(0), eps, tensor(op.writes[0]), rows, stream);
      return;
    }
    case OpKind::kMlaAttention: mla_attention(op, shape, *md, stream, ranges); return;
    case OpKind::kFinalNorm:
      model_kernels::rms_norm_rows(
          views_.tensors[op.reads[0]], views_.tensors[op.reads[1]].data_as<const std::int32_t>(),
          shape.reqs, weight(0), eps, rows_of(op.writes[0], shape.reqs), stream);
      return;
    case OpKind::kLmHead:
      linear(rows_of(op.reads[0], shape.reqs), op.weights, rows_of(op.writes[0], shape.reqs),
             shape.reqs, 0.0f, stream);
      return;
    case OpKind::kSample: {
      // The draw reads its parameters from the staged image, and the tokens go on to pinned
      // host memory in the same run, so a replay needs no copy call of its own.
      auto* ids = views_.tensors[op.writes[0]].data_as<std::int32_t>();
      model_kernels::sample(views_.tensors[op.reads[0]],
                            views_.tensors[op.reads[1]].data_as<const SampleRow>(), shape.reqs, ids,
                            stream);
      FF_CUDA_CHECK(cudaMemcpyAsync(host_tokens_.data(), ids, sizeof(std::int32_t) * shape.reqs,
                                    cudaMemcpyDeviceToHost, stream));
      return;
    }
    case OpKind::kDcpGatherQueries: {
      std::optional<NvtxRange> range;
      if (ranges) range.emplace(layers_[op.layer]->dcp_gather_range);
      dcp_gather_queries(op, rows, stream);
      return;
    }
    case OpKind::kDcpMerge: {
      std::optional<NvtxRange> range;
      if (ranges) range.emplace(layers_[op.layer]->dcp_merge_range);
      dcp_merge(op, rows, stream);
      return;
    }
  }
  FF_THROW(E::kInternal, "no implementation of op ", to_string(op.kind));
}

void ModelRunner::attention(const ProgramOp& op, const RunShape& shape, const AttentionMetadata& md,
                            cudaStream_t stream, bool ranges) {
  Layer& layer = *layers_[op.layer];
  const ModelSpec& model = spec_.model;
  const int rows = shape.rows;
  const TensorView qkv = views_.tensors[op.reads[0]];
  const std::int64_t h = shard_.query_heads, kv = shard_.kv_heads, d = model.head_size;
  const auto elem = static_cast<std::int64_t>(size_of(qkv.dtype()));
  auto heads = [&](std::int64_t first_head, std::int64_t count) {
    const std::int64_t shape3[] = {rows, count, d};
    const std::int64_t strides[] = {qkv.stride(0), d, 1};
    return TensorView::strided(static_cast<std::byte*>(qkv.data()) + first_head * d * elem,
                               qkv.dtype(), shape3, strides, qkv.device());
  };
  const TensorView out = views_.tensors[op.writes[0]];
  const std::int64_t out_shape[] = {rows, out.size(1)};
  const TensorView output(out.data(), out.dtype(), out_shape, out.device());
  std::optional<NvtxRange> range;  // pointless inside a capture
  if (ranges) range.emplace(layer.range);
  if (op.reads.size() == 1) {
    layer.impl->forward(layer.state, heads(0, h), heads(h, kv), heads(h + kv, kv), layer.kv_cache,
                        md, output, stream);
    return;
  }
  // DCP: the group's queries (q_group, rank-major heads) against this rank's shard, with the
  // LSE dcp_merge weighs the partial outputs by.
  const TensorView q_group = views_.tensors[op.reads[1]];
  const std::int64_t group = shard_.attention_heads;
  const std::int64_t query_shape[] = {rows, group, d};
  const std::int64_t query_strides[] = {q_group.stride(0), d, 1};
  const TensorView query = TensorView::strided(q_group.data(), q_group.dtype(), query_shape,
                                               query_strides, q_group.device());
  const TensorView lse = views_.tensors[op.writes[1]];
  const std::int64_t lse_shape[] = {rows, group};
  layer.impl->forward(layer.state, query, heads(h, kv), heads(h + kv, kv), layer.kv_cache, md,
                      output, stream, TensorView(lse.data(), DType::kF32, lse_shape, lse.device()));
}

void ModelRunner::mla_attention(const ProgramOp& op, const RunShape& shape,
                                const AttentionMetadata& md, cudaStream_t stream, bool ranges) {
  Layer& layer = *layers_[op.layer];
  const MlaSpec& mla = *spec_.model.mla;
  const int rows = shape.rows;
  // reads: query input, kv_c_normed, kv_a (its last qk_rope columns are k_pe), positions.
  const TensorView query_in = rows_of(op.reads[0], rows);
  const TensorView kv_c = rows_of(op.reads[1], rows);
  const TensorView kv_a = views_.tensors[op.reads[2]];
  const std::int64_t pe_shape[] = {rows, mla.qk_rope_head_dim};
  const std::int64_t pe_strides[] = {kv_a.stride(0), 1};
  const TensorView k_pe = TensorView::strided(
      static_cast<std::byte*>(kv_a.data()) +
          std::int64_t(mla.kv_lora_rank) * static_cast<std::int64_t>(size_of(kv_a.dtype())),
      kv_a.dtype(), pe_shape, pe_strides, kv_a.device());
  const TensorView out = views_.tensors[op.writes[0]];
  const std::int64_t out_shape[] = {rows, out.size(1)};
  const TensorView output(out.data(), out.dtype(), out_shape, out.device());
  std::optional<NvtxRange> range;
  if (ranges) range.emplace(layer.range);
  if (op.writes.size() == 1) {
    layer.mla->forward(layer.state, query_in, kv_c, k_pe, layer.kv_cache, md, output, stream);
    return;
  }
  // DCP: the group's heads against this rank's shard, with the LSE dcp_merge weighs them by.
  const TensorView lse = views_.tensors[op.writes[1]];
  const std::int64_t lse_shape[] = {rows, lse.size(1)};
  layer.mla->forward(layer.state, query_in, kv_c, k_pe, layer.kv_cache, md, output, stream,
                     TensorView(lse.data(), DType::kF32, lse_shape, lse.device()));
}

}  // namespace freezeframe
