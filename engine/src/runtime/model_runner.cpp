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
#include "runtime/moe_kernels.h"
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
  /// A MoE layer's experts: each one's gate_up ([2·I, hidden], gate and up back to back) and
  /// down weights, for the grouped GEMMs.
  std::vector<const void*> expert_gate_up, expert_down;
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
    if (program.ops[i].kind() == OpKind::kSample && !sample_tokens) continue;
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
      MlaParams params = mla_params(spec);
      scale_mla_rope(params, spec.model);
      layer->mla = backend.make_mla_impl(params, weights, dcp);
    } else {
      layer->impl = backend.make_impl(attention_params(spec, l, tp_rank_), dcp);
    }
    layers_.push_back(std::move(layer));
  }
  // Each MoE layer's expert pointers, once: the program places every expert's gate_proj and
  // up_proj back to back, so the grouped GEMM reads them as one matrix.
  for (const ProgramOp& op : program.ops) {
    if (op.kind() != OpKind::kMoeExperts) continue;
    const auto& m = op.as<ops::MoeExperts>();
    Layer& layer = *layers_[op.layer];
    for (std::size_t e = 0; e * 3 < m.experts.size(); ++e) {
      const std::span<const int> w(m.experts.data() + 3 * e, 3);
      FF_CHECK(back_to_back(w.first(2)), E::kInternal, "layer ", op.layer, ", expert ", e,
               ": gate_proj and up_proj are not back to back");
      layer.expert_gate_up.push_back(views.weights[w[0]].data());
      layer.expert_down.push_back(views.weights[w[2]].data());
    }
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
  switch (program_.ops[o.program_op].kind()) {
    case OpKind::kAttention:
    case OpKind::kDcpAttention:
    case OpKind::kMlaAttention:
    case OpKind::kDcpMlaAttention: return true;
    default: return false;
  }
}

bool ModelRunner::runs_between_graphs(int op) const {
  const Op& o = ops_[op];
  if (o.program_op < 0) return false;
  const auto uncapturable = [](const Communicator* c) { return c != nullptr && !c->capturable(); };
  switch (program_.ops[o.program_op].kind()) {
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
  return std::string(to_string(program_.ops[o.program_op].kind()));
}

void ModelRunner::set_kv_cache_scales(std::span<const KvCacheScales> scales) {
  FF_CHECK(scales.size() == layers_.size(), E::kInternal, scales.size(), " KV cache scales for ",
           layers_.size(), " layers");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->state.k_scale = scales[l].k;
    layers_[l]->state.v_scale = scales[l].v;
  }
}

void ModelRunner::init_weights(std::uint64_t seed, cudaStream_t stream) {
  // Matrices: uniform(±1/√fan_in) keeps activations O(1) through the layers (PyTorch's Linear
  // default).
  auto matrix_bound = [&](const ProgramWeight& weight, const WeightShard& part) {
    const std::int64_t fan_in = part.axis == 1 ? part.whole : weight.shape.back();
    return 1.0f / std::sqrt(static_cast<float>(fan_in));
  };
  constexpr float kE4m3Max = 448.0f;
  for (std::size_t w = 0; w < program_.weights.size(); ++w) {
    const ProgramWeight& weight = program_.weights[w];
    const TensorView& view = views_.weights[w];
    if (!view.defined()) continue;
    if (weight.scales_of >= 0) {
      // An fp8 matrix holds uniform values in ±448; its scales make them ±1/√fan_in.
      const ProgramWeight& m = program_.weights[weight.scales_of];
      const float scale = matrix_bound(m, weight_shard(spec_, m.name, tp_rank_)) / kE4m3Max;
      model_kernels::fill_uniform(view, seed + w, scale, scale, stream);
      continue;
    }
    // Vectors are norm scales near 1. The embedding is a matrix too, so the residual stream
    // starts near ±1/√hidden and the norms rescale it. A rank fills its block of the whole
    // weight with the whole weight's values.
    const bool matrix = weight.shape.size() == 2;
    const bool bias = weight.name.ends_with(".bias");
    const WeightShard part = weight_shard(spec_, weight.name, tp_rank_);
    const std::int64_t cols = weight.shape.back();
    const float bound = !matrix                           ? 0.0f
                        : weight.dtype == DType::kFp8E4M3 ? kE4m3Max
                                                          : matrix_bound(weight, part);
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
  return views_.tensors[tensor].narrow(0, 0, rows);
}

bool ModelRunner::back_to_back(std::span<const int> weights) const {
  for (std::size_t i = 1; i < weights.size(); ++i) {
    const TensorView& prev = views_.weights[weights[i - 1]];
    if (static_cast<const std::byte*>(prev.data()) + prev.span_bytes() !=
        static_cast<const std::byte*>(views_.weights[weights[i]].data())) {
      return false;
    }
  }
  return true;
}

void ModelRunner::linear(const TensorView& x, std::span<const int> weights, const TensorView& y,
                         int rows, float beta, const ops::Fp8Scales& fp8, cudaStream_t stream) {
  const float* x_scale =
      fp8.defined() ? views_.tensors[fp8.in_scale].data_as<const float>() : nullptr;
  auto gemm = [&](const TensorView& weight, int first, const TensorView& out) {
    if (x_scale == nullptr) return gemm_->linear(x, weight, out, rows, beta, stream);
    const float* weight_scale = views_.weights[fp8.weight_scales[first]].data_as<const float>();
    gemm_->linear_fp8(x, x_scale, weight, weight_scale, out, rows, beta, stream);
  };
  // Weights packed back to back form one [Σ N, K] matrix: one GEMM instead of several (fp8
  // ones when their scales lie back to back too).
  const bool fused =
      back_to_back(weights) && (x_scale == nullptr || back_to_back(fp8.weight_scales));
  if (fused) {
    std::int64_t n_total = 0;
    for (const int w : weights) n_total += views_.weights[w].size(0);
    const TensorView& first = views_.weights[weights[0]];
    const std::int64_t shape[] = {n_total, first.size(1)};
    gemm(TensorView(first.data(), first.dtype(), shape, first.device()), 0, y);
    return;
  }
  std::int64_t column = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const TensorView& weight = views_.weights[weights[i]];
    gemm(weight, static_cast<int>(i), y.narrow(1, column, weight.size(0)));
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
  // An op's 16-bit output that only its fp8 rows may stand in for (-1: none).
  auto optional_rows = [&](int t) { return t >= 0 ? rows_of(t, rows) : TensorView{}; };
  auto fp8_rows = [&](const ops::Fp8Rows& f) {
    return model_kernels::Fp8RowsOut{rows_of(f.rows, rows),
                                     views_.tensors[f.scale].data_as<float>()};
  };
  auto weight = [&](int w) -> const TensorView& { return views_.weights[w]; };
  // Only attention reads metadata: the ops around the layers have inputs of their own.
  const AttentionMetadata* md = op.layer >= 0 ? metadata[backend_of_layer_[op.layer]] : nullptr;
  // Eager steps only: a range is pointless inside a capture.
  std::optional<NvtxRange> range;

  switch (op.kind()) {
    case OpKind::kEmbedding: {
      const auto& e = op.as<ops::Embedding>();
      model_kernels::embedding(
          weight(e.table), views_.tensors[e.token_ids].data_as<const std::int32_t>(), rows,
          tensor(e.hidden), stream, std::int64_t(tp_rank_) * shard_.vocab_rows);
      return;
    }
    case OpKind::kRmsNorm: {
      const auto& n = op.as<ops::RmsNorm>();
      if (n.fp8.defined()) {
        model_kernels::rms_norm_fp8(tensor(n.in), weight(n.weight), eps, optional_rows(n.out),
                                    fp8_rows(n.fp8), rows, stream);
      } else {
        model_kernels::rms_norm(tensor(n.in), weight(n.weight), eps, tensor(n.out), rows, stream);
      }
      return;
    }
    case OpKind::kQuantizeRows: {
      const auto& q = op.as<ops::QuantizeRows>();
      model_kernels::quantize_rows_fp8(tensor(q.in), tensor(q.out),
                                       views_.tensors[q.scale].data_as<float>(), rows, stream);
      return;
    }
    case OpKind::kMoeExperts:
      return experts(op.as<ops::MoeExperts>(), *layers_[op.layer], rows, stream);
    case OpKind::kQkvProj: return project(op.as<ops::QkvProj>(), rows, stream);
    case OpKind::kGateUpProj: return project(op.as<ops::GateUpProj>(), rows, stream);
    case OpKind::kMlaKvAProj: return project(op.as<ops::MlaKvAProj>(), rows, stream);
    case OpKind::kQkvBias: {
      // Each bias onto its columns of qkv: the q heads', then k's, then v's.
      const auto& b = op.as<ops::QkvBias>();
      const TensorView qkv = tensor(b.qkv);
      std::int64_t column = 0;
      for (const int w : {b.q_bias, b.k_bias, b.v_bias}) {
        const TensorView& bias = weight(w);
        model_kernels::add_bias(qkv.narrow(1, column, bias.size(0)), bias, rows, stream);
        column += bias.size(0);
      }
      return;
    }
    case OpKind::kRope: {
      if (!layers_[op.layer]->rope) return;
      const auto& r = op.as<ops::Rope>();
      model_kernels::rope_neox(tensor(r.qkv),
                               views_.tensors[r.positions].data_as<const std::int64_t>(), rows,
                               shard_.query_heads, shard_.kv_heads, model.head_size,
                               model.head_size, rope_inv_freq_, stream);
      return;
    }
    case OpKind::kCacheWrite:
      return;  // the attention forward writes the cache (see model_runner.h)
    case OpKind::kAttention:
    case OpKind::kDcpAttention: attention(op, shape, *md, stream, ranges); return;
    case OpKind::kOProjResidual: return add_projection(op.as<ops::OProjResidual>(), rows, stream);
    case OpKind::kDownProjResidual:
      return add_projection(op.as<ops::DownProjResidual>(), rows, stream);
    case OpKind::kAllReduce: {
      if (ranges) {
        range.emplace(op.layer < 0 ? "all_reduce[embedding]"
                                   : layers_[op.layer]->all_reduce_range.c_str());
      }
      const TensorView hidden = views_.tensors[op.as<ops::AllReduce>().hidden];
      communicator_->all_reduce(hidden.data(), hidden.data(),
                                static_cast<std::size_t>(rows) * hidden.size(1), hidden.dtype(),
                                stream);
      return;
    }
    case OpKind::kGatherLogits:
      if (ranges) range.emplace("gather_logits");
      gather_logits(op.as<ops::GatherLogits>(), shape.reqs, stream);
      return;
    case OpKind::kSiluAndMul: {
      const auto& m = op.as<ops::SiluAndMul>();
      if (m.fp8.defined()) {
        model_kernels::silu_and_mul_fp8(tensor(m.gate_up), optional_rows(m.act), fp8_rows(m.fp8),
                                        rows, stream);
      } else {
        model_kernels::silu_and_mul(tensor(m.gate_up), tensor(m.act), rows, stream);
      }
      return;
    }
    case OpKind::kMlaQProj: {
      // q_a = x · W_q_aᵀ, then its layernorm (in place).
      const auto& q = op.as<ops::MlaQProj>();
      const int gemm_weights[] = {q.q_a_proj};
      linear(tensor(q.x), gemm_weights, tensor(q.q_a), rows, 0.0f, {}, stream);
      model_kernels::rms_norm(tensor(q.q_a), weight(q.q_a_norm), eps, tensor(q.q_a), rows, stream);
      return;
    }
    case OpKind::kMlaKvANorm: {
      // The first kv_lora_rank columns of kv_a (the rest are k_pe).
      const auto& n = op.as<ops::MlaKvANorm>();
      model_kernels::rms_norm(tensor(n.kv_a).narrow(1, 0, model.mla->kv_lora_rank),
                              weight(n.weight), eps, tensor(n.kv_c), rows, stream);
      return;
    }
    case OpKind::kMlaAttention:
    case OpKind::kDcpMlaAttention: mla_attention(op, shape, *md, stream, ranges); return;
    case OpKind::kFinalNorm: {
      const auto& n = op.as<ops::FinalNorm>();
      model_kernels::rms_norm_rows(
          views_.tensors[n.hidden], views_.tensors[n.lm_head_rows].data_as<const std::int32_t>(),
          shape.reqs, weight(n.weight), eps, rows_of(n.normed, shape.reqs), stream);
      return;
    }
    case OpKind::kLmHead: {
      const auto& h = op.as<ops::LmHead>();
      const int gemm_weights[] = {h.weight};
      linear(rows_of(h.normed, shape.reqs), gemm_weights, rows_of(h.logits, shape.reqs), shape.reqs,
             0.0f, {}, stream);
      return;
    }
    case OpKind::kSample: {
      // The draw reads its parameters from the staged image, and the tokens go on to pinned
      // host memory in the same run, so a replay needs no copy call of its own.
      const auto& d = op.as<ops::Sample>();
      auto* ids = views_.tensors[d.sampled].data_as<std::int32_t>();
      model_kernels::sample(views_.tensors[d.logits],
                            views_.tensors[d.params].data_as<const SampleRow>(), shape.reqs, ids,
                            stream);
      FF_CUDA_CHECK(cudaMemcpyAsync(host_tokens_.data(), ids, sizeof(std::int32_t) * shape.reqs,
                                    cudaMemcpyDeviceToHost, stream));
      return;
    }
    case OpKind::kDcpGatherQueries:
      if (ranges) range.emplace(layers_[op.layer]->dcp_gather_range);
      dcp_gather_queries(op.as<ops::DcpGatherQueries>(), rows, stream);
      return;
    case OpKind::kDcpMerge:
      if (ranges) range.emplace(layers_[op.layer]->dcp_merge_range);
      dcp_merge(op.as<ops::DcpMerge>(), rows, stream);
      return;
  }
  FF_THROW(E::kInternal, "no implementation of op ", to_string(op.kind()));
}

void ModelRunner::project(const ops::Projection& p, int rows, cudaStream_t stream) {
  linear(rows_of(p.in, rows), p.weights, rows_of(p.out, rows), rows, 0.0f, p.fp8, stream);
}

void ModelRunner::add_projection(const ops::ResidualProjection& p, int rows, cudaStream_t stream) {
  // hidden += x · Wᵀ: the GEMM accumulates into the residual stream (beta = 1). Over T ranks
  // each writes its partial sum, rank 0 with the residual, and all_reduce adds them.
  const int gemm_weights[] = {p.weight};
  linear(rows_of(p.in, rows), gemm_weights, rows_of(p.hidden, rows), rows,
         tp_rank_ == 0 ? 1.0f : 0.0f, p.fp8, stream);
}

void ModelRunner::experts(const ops::MoeExperts& m, const Layer& layer, int rows,
                          cudaStream_t stream) {
  const MoeSpec& moe = *spec_.model.moe;
  const int k = moe.experts_per_token;
  const int count = rows * k;  // (token, slot) rows
  // The router's logits in f32, then each token's experts and their weights.
  const int router[] = {m.router};
  linear(rows_of(m.in, rows), router, rows_of(m.router_logits, rows), rows, 0.0f, {}, stream);
  model_kernels::moe_route(rows_of(m.router_logits, rows),
                           {k, moe.num_groups, moe.top_groups, moe.routed_scaling_factor},
                           rows_of(m.topk_ids, rows), rows_of(m.topk_weights, rows), rows, stream);
  const TensorView sorted_ids = rows_of(m.sorted_ids, rows);
  const TensorView sorted_rows = rows_of(m.sorted_rows, rows);
  model_kernels::moe_sort(rows_of(m.topk_ids, rows), moe.num_experts, sorted_ids, sorted_rows, rows,
                          stream);
  const TensorView& first = views_.weights[m.experts[0]];
  const std::int64_t inter = first.size(0), hidden = first.size(1);
  // The [T, k·width] scratch seen as T·k rows.
  auto as_slots = [&](int t, std::int64_t width) {
    const TensorView v = views_.tensors[t];
    const std::int64_t shape[] = {v.size(0) * k, width};
    return TensorView(v.data(), v.dtype(), shape, v.device()).narrow(0, 0, count);
  };
  const TensorView gate_up_rows = as_slots(m.gate_up, 2 * inter);
  const TensorView act_rows = as_slots(m.act, inter);
  const TensorView out_rows = as_slots(m.expert_out, hidden);
  model_kernels::moe_grouped_gemm(rows_of(m.in, rows), k, sorted_ids, sorted_rows, count,
                                  layer.expert_gate_up, 2 * inter, hidden, gate_up_rows, stream);
  model_kernels::silu_and_mul(gate_up_rows, act_rows, count, stream);
  model_kernels::moe_grouped_gemm(act_rows, 1, sorted_ids, sorted_rows, count, layer.expert_down,
                                  hidden, inter, out_rows, stream);
  // Rank 0 adds to the residual; another adds to the partial sum its shared experts wrote, or
  // writes its own.
  model_kernels::moe_combine(out_rows, rows_of(m.topk_weights, rows), k, rows_of(m.hidden, rows),
                             tp_rank_ == 0 || moe.num_shared_experts > 0, rows, stream);
}

void ModelRunner::attention(const ProgramOp& op, const RunShape& shape, const AttentionMetadata& md,
                            cudaStream_t stream, bool ranges) {
  Layer& layer = *layers_[op.layer];
  const int rows = shape.rows;
  const std::int64_t h = shard_.query_heads, kv = shard_.kv_heads, d = spec_.model.head_size;
  // Heads [first, first + count) of each row of qkv, as [rows, count, d].
  auto heads = [&](int qkv, std::int64_t first, std::int64_t count) {
    return rows_of(qkv, rows).narrow(1, first * d, count * d).unflatten(1, count);
  };
  std::optional<NvtxRange> range;  // pointless inside a capture
  if (ranges) range.emplace(layer.range);
  if (op.kind() == OpKind::kAttention) {
    const auto& a = op.as<ops::Attention>();
    layer.impl->forward(layer.state, heads(a.qkv, 0, h), heads(a.qkv, h, kv),
                        heads(a.qkv, h + kv, kv), layer.kv_cache, md, rows_of(a.out, rows), stream);
    return;
  }
  // DCP: the group's queries (q_group, rank-major heads) against this rank's shard, with the
  // LSE dcp_merge weighs the partial outputs by.
  const auto& a = op.as<ops::DcpAttention>();
  const std::int64_t group = shard_.attention_heads;
  layer.impl->forward(layer.state, heads(a.q_group, 0, group), heads(a.qkv, h, kv),
                      heads(a.qkv, h + kv, kv), layer.kv_cache, md, rows_of(a.partial, rows),
                      stream, rows_of(a.lse, rows));
}

void ModelRunner::mla_attention(const ProgramOp& op, const RunShape& shape,
                                const AttentionMetadata& md, cudaStream_t stream, bool ranges) {
  Layer& layer = *layers_[op.layer];
  const MlaSpec& mla = *spec_.model.mla;
  const int rows = shape.rows;
  const bool dcp = op.kind() == OpKind::kDcpMlaAttention;
  const ops::MlaInputs& in = dcp ? op.as<ops::DcpMlaAttention>().in : op.as<ops::MlaAttention>().in;
  // kv_a's last qk_rope columns are k_pe.
  const TensorView k_pe = rows_of(in.kv_a, rows).narrow(1, mla.kv_lora_rank, mla.qk_rope_head_dim);
  std::optional<NvtxRange> range;
  if (ranges) range.emplace(layer.range);
  if (!dcp) {
    layer.mla->forward(layer.state, rows_of(in.query_in, rows), rows_of(in.kv_c, rows), k_pe,
                       layer.kv_cache, md, rows_of(op.as<ops::MlaAttention>().out, rows), stream);
    return;
  }
  // DCP: the group's heads against this rank's shard, with the LSE dcp_merge weighs them by.
  const auto& a = op.as<ops::DcpMlaAttention>();
  layer.mla->forward(layer.state, rows_of(in.query_in, rows), rows_of(in.kv_c, rows), k_pe,
                     layer.kv_cache, md, rows_of(a.partial, rows), stream, rows_of(a.lse, rows));
}

}  // namespace freezeframe
