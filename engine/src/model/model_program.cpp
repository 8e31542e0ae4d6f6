#include "freezeframe/engine/model/model_program.h"

#include "freezeframe/base/error.h"
#include "freezeframe/engine/spec/tensor_parallel.h"

namespace freezeframe {

std::string_view to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kQkvProj: return "qkv_proj";
    case OpKind::kQkvBias: return "qkv_bias";
    case OpKind::kRope: return "rope";
    case OpKind::kCacheWrite: return "cache_write";
    case OpKind::kAttention: return "attention";
    case OpKind::kOProjResidual: return "o_proj_residual";
    case OpKind::kGateUpProj: return "gate_up_proj";
    case OpKind::kSiluAndMul: return "silu_and_mul";
    case OpKind::kDownProjResidual: return "down_proj_residual";
    case OpKind::kMlaQProj: return "mla_q_proj";
    case OpKind::kMlaKvAProj: return "mla_kv_a_proj";
    case OpKind::kMlaKvANorm: return "mla_kv_a_norm";
    case OpKind::kMlaAttention: return "mla_attention";
    case OpKind::kFinalNorm: return "final_norm";
    case OpKind::kLmHead: return "lm_head";
    case OpKind::kSample: return "sample";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kGatherLogits: return "gather_logits";
    case OpKind::kDcpGatherQueries: return "dcp_gather_queries";
    case OpKind::kDcpAttention: return "dcp_attention";
    case OpKind::kDcpMlaAttention: return "dcp_mla_attention";
    case OpKind::kDcpMerge: return "dcp_merge";
    case OpKind::kQuantizeRows: return "quantize_rows";
    case OpKind::kMoeExperts: return "moe_experts";
  }
  return "unknown";
}

std::int64_t ProgramWeight::bytes() const {
  std::int64_t n = static_cast<std::int64_t>(size_of(dtype));
  for (const std::int64_t d : shape) n *= d;
  return n;
}

std::vector<ModelProgram::Lifetime> ModelProgram::lifetimes() const {
  std::vector<Lifetime> result(tensors.size());
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    auto touch = [&](int t) {
      Lifetime& l = result[t];
      if (l.first_op < 0) l.first_op = i;
      l.last_op = i;
    };
    for (const int t : ops[i].writes) touch(t);
    for (const int t : ops[i].reads) touch(t);
  }
  return result;
}

std::int64_t ModelProgram::weight_bytes() const {
  std::int64_t total = 0;
  for (const ProgramWeight& w : weights) total += w.bytes();
  return total;
}

int ModelProgram::tensor_index(std::string_view name) const {
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    if (tensors[i].name == name) return i;
  }
  FF_THROW(ErrorCode::kNotFound, "the model program has no tensor '", name, "'");
}

std::vector<TensorLifetime> activation_lifetimes(const ModelProgram& program, std::int64_t tokens,
                                                 std::int64_t sequences,
                                                 std::vector<int>* tensor_ids) {
  const auto lifetimes = program.lifetimes();
  std::vector<TensorLifetime> result;
  if (tensor_ids != nullptr) tensor_ids->clear();
  for (int t = 0; t < static_cast<int>(program.tensors.size()); ++t) {
    const ProgramTensor& tensor = program.tensors[t];
    if (tensor.home != TensorHome::kActivation || lifetimes[t].first_op < 0) continue;
    result.push_back(
        {tensor.bytes(tokens, sequences), lifetimes[t].first_op, lifetimes[t].last_op});
    if (tensor_ids != nullptr) tensor_ids->push_back(t);
  }
  return result;
}

namespace {

/// A projection's input: rows in the model's dtype and/or, with fp8 projections, their fp8
/// rows and scales (the GEMM reads those).
struct ProjectionInput {
  int rows = -1;
  ops::Fp8Rows fp8;
  [[nodiscard]] int gemm_rows() const { return fp8.defined() ? fp8.rows : rows; }
};

class ProgramBuilder {
 public:
  explicit ProgramBuilder(const EngineSpec& spec)
      : spec_(spec), model_(spec.model), shard_(tp_shard(spec)) {}

  ModelProgram build();

 private:
  int tensor(std::string name, std::int64_t width, int layer,
             TensorHome home = TensorHome::kActivation, DType dtype = DType::kU8,
             Rows rows = Rows::kTokens) {
    ProgramTensor t;
    t.name = std::move(name);
    t.dtype = dtype == DType::kU8 ? model_.dtype : dtype;
    t.rows = rows;
    t.width = width;
    t.home = home;
    t.layer = layer;
    p_.tensors.push_back(std::move(t));
    return static_cast<int>(p_.tensors.size()) - 1;
  }
  int weight(std::string name, std::vector<std::int64_t> shape, int layer,
             DType dtype = DType::kU8) {
    p_.weights.push_back(
        {std::move(name), dtype == DType::kU8 ? model_.dtype : dtype, std::move(shape), layer});
    return static_cast<int>(p_.weights.size()) - 1;
  }
  /// A projection's weight [out, in]: in fp8 with model.quantization fp8.
  int linear_weight(std::string name, std::vector<std::int64_t> shape, int layer) {
    return weight(std::move(name), std::move(shape), layer,
                  model_.fp8_linear ? DType::kFp8E4M3 : model_.dtype);
  }
  /// The rows an op writes for a projection to read: `name`, `width` wide, in the model's
  /// dtype; with fp8 projections the op writes them quantised instead (`name`_fp8 and a scale
  /// per row, `name`_scale), and in the model's dtype as well only when `also_16_bit` (another
  /// op reads them).
  ProjectionInput projection_input(int l, const std::string& name, std::int64_t width,
                                   bool also_16_bit = false) {
    ProjectionInput in;
    if (!model_.fp8_linear || also_16_bit) in.rows = tensor(name, width, l);
    if (model_.fp8_linear) in.fp8 = fp8_rows(l, name, width);
    return in;
  }
  ops::Fp8Rows fp8_rows(int l, const std::string& name, std::int64_t width) {
    // cuBLASLt's fp8 GEMMs read rows of whole 16-byte units.
    FF_CHECK(width % 16 == 0, ErrorCode::kInvalidArgument,
             "model.quantization: fp8 needs each projection's input to be a multiple of 16 wide on "
             "a rank; ",
             name, " is ", width);
    return {tensor(name + "_fp8", width, l, TensorHome::kActivation, DType::kFp8E4M3),
            tensor(name + "_scale", 1, l, TensorHome::kActivation, DType::kF32)};
  }
  /// `x`, written by an op that cannot quantise it itself (attention), as a projection's input:
  /// with fp8 projections, quantised per row by an op of its own.
  ProjectionInput quantized(int l, int x, std::int64_t width) {
    ProjectionInput in{x, {}};
    if (!model_.fp8_linear) return in;
    in.fp8 = fp8_rows(l, p_.tensors[x].name, width);
    op(l, ops::QuantizeRows{x, in.fp8.rows, in.fp8.scale});
    return in;
  }
  /// The scales of an fp8 GEMM of `in` by `weights`: the input's per row and the weights' per
  /// channel (placed after all of them, so a fused GEMM's scales lie back to back as its
  /// weights do); none without fp8 projections.
  ops::Fp8Scales fp8_scales(int l, const ProjectionInput& in, const std::vector<int>& weights) {
    if (!in.fp8.defined()) return {};
    ops::Fp8Scales s{in.fp8.scale, {}};
    for (const int w : weights) {
      const ProgramWeight& matrix = p_.weights[w];
      const int index = weight(matrix.name + ".weight_scale", {matrix.shape[0]}, l, DType::kF32);
      p_.weights[index].scales_of = w;
      s.weight_scales.push_back(index);
    }
    return s;
  }
  template <class Operands>
  void op(int layer, Operands operands) {
    p_.ops.emplace_back(layer, std::move(operands));
  }
  /// With DCP, the merge of an attention op's partial outputs (`group` heads of width `d`,
  /// rank-major, and their LSE) into `out`, this rank's heads; its buffers are program tensors,
  /// so the plan holds them at addresses fixed for the engine's life (graph replays).
  void dcp_merge(int l, int partial, int lse, int out, std::int64_t group, std::int64_t d) {
    const std::string pre = prefix(l);
    const int out_send = tensor(pre + "dcp_out_send", group * d, l);
    const int lse_send =
        tensor(pre + "dcp_lse_send", group, l, TensorHome::kActivation, DType::kF32);
    const int out_recv = tensor(pre + "dcp_out_recv", group * d, l);
    const int lse_recv =
        tensor(pre + "dcp_lse_recv", group, l, TensorHome::kActivation, DType::kF32);
    op(l, ops::DcpMerge{partial, lse, out, out_send, lse_send, out_recv, lse_recv});
  }
  /// Over T ranks, the residual stream summed after an op that wrote partial sums.
  void all_reduce(int layer, int hidden) {
    if (shard_.world > 1) op(layer, ops::AllReduce{hidden});
  }
  void attention_block(int l, int hidden);
  void mla_block(int l, int hidden);
  void mlp_block(int l, int hidden);
  void moe_block(int l, int hidden);
  /// hidden += down(silu(gate(x)) · up(x)), `inter` wide on this rank: the weights named
  /// `weights` + "gate_proj", ..., the activations `tensors` + "gate_up", "mlp_act".
  void gated_mlp(int l, const ProjectionInput& x, int hidden, const std::string& weights,
                 const std::string& tensors, std::int64_t inter);
  /// hidden += out · W_oᵀ (out `width` wide), then the tensor-parallel sum.
  void o_proj(int l, int out, int hidden, std::int64_t width);
  std::string prefix(int l) const { return "layers." + std::to_string(l) + "."; }

  const EngineSpec& spec_;
  const ModelSpec& model_;
  const TpShard shard_;  // this rank's heads, MLP width and vocabulary rows
  ModelProgram p_;
  int positions_ = -1;
};

ModelProgram ProgramBuilder::build() {
  const std::int64_t h = model_.hidden_size;
  const int token_ids = tensor("token_ids", 1, -1, TensorHome::kInput, DType::kI32);
  const int positions = tensor("positions", 1, -1, TensorHome::kInput, DType::kI64);
  // The residual stream, updated in place.
  const int hidden = tensor("hidden", h, -1, TensorHome::kActivation, model_.residual_dtype());
  const std::int64_t vocab_rows = shard_.vocab_rows;
  const int embed = weight("embed_tokens", {vocab_rows, h}, -1);
  op(-1, ops::Embedding{token_ids, hidden, embed});
  all_reduce(-1, hidden);
  positions_ = positions;  // read by rope / MLA attention
  for (int l = 0; l < model_.num_layers; ++l) {
    if (model_.is_mla()) {
      mla_block(l, hidden);
    } else {
      attention_block(l, hidden);
    }
    if (model_.layers[l].mlp == MlpKind::kGatedSilu) mlp_block(l, hidden);
    if (model_.layers[l].mlp == MlpKind::kMoe) moe_block(l, hidden);
  }
  // The row of each request's last new token, the one its logits come from (padded requests:
  // row 0, ignored).
  const int lm_head_rows =
      tensor("lm_head_rows", 1, -1, TensorHome::kInput, DType::kI32, Rows::kSequences);
  const int normed =
      tensor("final_normed", h, -1, TensorHome::kActivation, DType::kU8, Rows::kSequences);
  op(-1, ops::FinalNorm{hidden, lm_head_rows, normed, weight("norm", {h}, -1)});
  const int logits =
      tensor("logits", model_.vocab_size, -1, TensorHome::kOutput, DType::kF32, Rows::kSequences);
  const int lm_head = model_.tie_word_embeddings ? embed : weight("lm_head", {vocab_rows, h}, -1);
  // Over T ranks the LM head writes this rank's vocabulary rows, then every rank's are
  // gathered (rank-major) and laid side by side into the logits, the padding rows dropped.
  if (shard_.world == 1) {
    op(-1, ops::LmHead{normed, logits, lm_head});
  } else {
    const int shard = tensor("logits_shard", vocab_rows, -1, TensorHome::kActivation, DType::kF32,
                             Rows::kSequences);
    op(-1, ops::LmHead{normed, shard, lm_head});
    const int gathered = tensor("logits_gathered", shard_.padded_vocab, -1, TensorHome::kActivation,
                                DType::kF32, Rows::kSequences);
    op(-1, ops::GatherLogits{shard, gathered, logits});
  }
  // Each sequence's sampling parameters (32 bytes: the sampler kernel's SampleRow) and the
  // token drawn for it.
  const int sampling =
      tensor("sampling_params", 4, -1, TensorHome::kInput, DType::kI64, Rows::kSequences);
  const int sampled =
      tensor("sampled_token_ids", 1, -1, TensorHome::kOutput, DType::kI32, Rows::kSequences);
  op(-1, ops::Sample{logits, sampling, sampled});
  return std::move(p_);
}

void ProgramBuilder::attention_block(int l, int hidden) {
  const std::int64_t h = model_.hidden_size, heads = shard_.query_heads;
  const std::int64_t kv = shard_.kv_heads, d = model_.head_size;
  const std::string pre = prefix(l);
  const int positions = positions_;
  const LayerSpec& layer = model_.layers[l];

  const ProjectionInput x = projection_input(l, pre + "attn_in", h);
  op(l, ops::RmsNorm{hidden, x.rows, weight(pre + "input_layernorm", {h}, l), x.fp8});
  const int qkv = tensor(pre + "qkv", (heads + 2 * kv) * d, l);
  const std::vector<int> qkv_weights = {linear_weight(pre + "self_attn.q_proj", {heads * d, h}, l),
                                        linear_weight(pre + "self_attn.k_proj", {kv * d, h}, l),
                                        linear_weight(pre + "self_attn.v_proj", {kv * d, h}, l)};
  op(l, ops::QkvProj{{x.gemm_rows(), qkv, qkv_weights, fp8_scales(l, x, qkv_weights)}});
  if (model_.checkpoint && model_.checkpoint->qkv_bias) {
    op(l, ops::QkvBias{qkv, weight(pre + "self_attn.q_proj.bias", {heads * d}, l),
                       weight(pre + "self_attn.k_proj.bias", {kv * d}, l),
                       weight(pre + "self_attn.v_proj.bias", {kv * d}, l)});
  }
  op(l, ops::Rope{qkv, positions});
  // A layer that shares another layer's cache writes none of its own.
  if (layer.kv_sharing_target < 0 && uses_kv_cache(layer.attention_type)) {
    op(l, ops::CacheWrite{qkv});
  }
  const int out = tensor(pre + "attn_out", heads * d, l);
  if (spec_.dcp.world_size == 1) {
    op(l, ops::Attention{qkv, out});
  } else {
    // With DCP the rank attends its group's queries (gathered over heads: G = D · its own)
    // against its shard of the keys, and the merge hands each rank its own heads back, merged
    // over the group by their LSEs. Every buffer the collectives touch is a program tensor,
    // so the plan holds it at an address fixed for the engine's life (graph replays).
    const std::int64_t group = shard_.attention_heads;
    const int q_group = tensor(pre + "q_group", group * d, l);
    op(l, ops::DcpGatherQueries{qkv, q_group, tensor(pre + "dcp_q_send", heads * d, l),
                                tensor(pre + "dcp_q_recv", group * d, l)});
    const int partial = tensor(pre + "attn_partial", group * d, l);
    const int lse = tensor(pre + "attn_lse", group, l, TensorHome::kActivation, DType::kF32);
    op(l, ops::DcpAttention{qkv, q_group, partial, lse});
    dcp_merge(l, partial, lse, out, group, d);
  }
  o_proj(l, out, hidden, heads * d);
}

void ProgramBuilder::o_proj(int l, int out, int hidden, std::int64_t width) {
  const int w = linear_weight(prefix(l) + "self_attn.o_proj", {model_.hidden_size, width}, l);
  const ProjectionInput in = quantized(l, out, width);
  op(l, ops::OProjResidual{{in.gemm_rows(), hidden, w, fp8_scales(l, in, {w})}});
  all_reduce(l, hidden);
}

void ProgramBuilder::mla_block(int l, int hidden) {
  const MlaSpec& mla = *model_.mla;
  // The impl computes `group` heads: this rank's, or under DCP its group's, every rank of which
  // has the query's input already (no gather), each against its shard of the latent.
  const std::int64_t h = model_.hidden_size, heads = shard_.query_heads;
  const std::int64_t group = shard_.attention_heads;
  const std::int64_t r = mla.kv_lora_rank, rope = mla.qk_rope_head_dim;
  const std::string pre = prefix(l);
  const int positions = positions_;

  const int x = tensor(pre + "attn_in", h, l);
  op(l, ops::RmsNorm{hidden, x, weight(pre + "input_layernorm", {h}, l)});
  // With q_lora the query is compressed first; its normed latent is the impl's input.
  int query_in = x;
  if (mla.q_lora_rank > 0) {
    const int cq = tensor(pre + "q_a", mla.q_lora_rank, l);
    op(l, ops::MlaQProj{x, cq, weight(pre + "self_attn.q_a_proj", {mla.q_lora_rank, h}, l),
                        weight(pre + "self_attn.q_a_layernorm", {mla.q_lora_rank}, l)});
    query_in = cq;
  }
  const std::int64_t q_in_width = mla.q_lora_rank > 0 ? mla.q_lora_rank : h;
  const int q_proj = weight(pre + (mla.q_lora_rank > 0 ? "self_attn.q_b_proj" : "self_attn.q_proj"),
                            {group * (mla.qk_nope_head_dim + rope), q_in_width}, l);
  const int kv_a = tensor(pre + "kv_a", r + rope, l);
  op(l,
     ops::MlaKvAProj{{x, kv_a, {weight(pre + "self_attn.kv_a_proj_with_mqa", {r + rope, h}, l)}}});
  const int kv_c = tensor(pre + "kv_c_normed", r, l);
  op(l, ops::MlaKvANorm{kv_a, kv_c, weight(pre + "self_attn.kv_a_layernorm", {r}, l)});
  const int out = tensor(pre + "attn_out", heads * mla.v_head_dim, l);
  const ops::MlaInputs in{
      .query_in = query_in,
      .kv_c = kv_c,
      .kv_a = kv_a,
      .positions = positions,
      .q_proj = q_proj,
      .kv_b_proj = weight(pre + "self_attn.kv_b_proj",
                          {group * (mla.qk_nope_head_dim + mla.v_head_dim), r}, l)};
  if (spec_.dcp.world_size == 1) {
    op(l, ops::MlaAttention{in, out});
  } else {
    const int partial = tensor(pre + "attn_partial", group * mla.v_head_dim, l);
    const int lse = tensor(pre + "attn_lse", group, l, TensorHome::kActivation, DType::kF32);
    op(l, ops::DcpMlaAttention{in, partial, lse});
    dcp_merge(l, partial, lse, out, group, mla.v_head_dim);
  }
  o_proj(l, out, hidden, heads * mla.v_head_dim);
}

void ProgramBuilder::mlp_block(int l, int hidden) {
  const std::string pre = prefix(l);
  const ProjectionInput x = projection_input(l, pre + "mlp_in", model_.hidden_size);
  op(l, ops::RmsNorm{hidden, x.rows,
                     weight(pre + "post_attention_layernorm", {model_.hidden_size}, l), x.fp8});
  gated_mlp(l, x, hidden, pre + "mlp.", pre,
            shard_.intermediate(model_.layers[l].intermediate_size));
  all_reduce(l, hidden);
}

void ProgramBuilder::moe_block(int l, int hidden) {
  const MoeSpec& moe = *model_.moe;
  const std::int64_t h = model_.hidden_size, e = moe.num_experts, k = moe.experts_per_token;
  const std::int64_t inter = shard_.intermediate(moe.intermediate_size);
  const std::string pre = prefix(l);
  // The router reads the normed rows in the model's dtype; the shared experts' projections
  // read them in fp8 with fp8 projections.
  const bool shared = moe.num_shared_experts > 0;
  const ProjectionInput x = shared ? projection_input(l, pre + "mlp_in", h, /*also_16_bit=*/true)
                                   : ProjectionInput{tensor(pre + "mlp_in", h, l), {}};
  op(l, ops::RmsNorm{hidden, x.rows, weight(pre + "post_attention_layernorm", {h}, l), x.fp8});
  // The shared experts: one MLP as wide as all of them, on every token.
  if (shared) {
    gated_mlp(l, x, hidden, pre + "mlp.shared_experts.", pre + "shared_",
              shard_.intermediate(std::int64_t(moe.num_shared_experts) * moe.intermediate_size));
  }
  // The routed experts: every token's k (token, slot) rows, ordered by expert (static in shape:
  // T · k rows whatever the routing, so the step captures).
  ops::MoeExperts m{};
  m.in = x.rows;
  m.hidden = hidden;
  m.router_logits = tensor(pre + "router_logits", e, l, TensorHome::kActivation, DType::kF32);
  m.topk_ids = tensor(pre + "topk_ids", k, l, TensorHome::kActivation, DType::kI32);
  m.topk_weights = tensor(pre + "topk_weights", k, l, TensorHome::kActivation, DType::kF32);
  m.sorted_ids = tensor(pre + "experts_sorted_ids", k, l, TensorHome::kActivation, DType::kI32);
  m.sorted_rows = tensor(pre + "experts_sorted_rows", k, l, TensorHome::kActivation, DType::kI32);
  m.gate_up = tensor(pre + "experts_gate_up", k * 2 * inter, l);
  m.act = tensor(pre + "experts_act", k * inter, l);
  m.expert_out = tensor(pre + "experts_out", k * h, l);
  m.router = weight(pre + "mlp.gate", {e, h}, l);
  for (std::int64_t i = 0; i < e; ++i) {
    const std::string expert = pre + "mlp.experts." + std::to_string(i) + ".";
    m.experts.push_back(weight(expert + "gate_proj", {inter, h}, l));
    m.experts.push_back(weight(expert + "up_proj", {inter, h}, l));
    m.experts.push_back(weight(expert + "down_proj", {h, inter}, l));
  }
  op(l, std::move(m));
  all_reduce(l, hidden);
}

void ProgramBuilder::gated_mlp(int l, const ProjectionInput& x, int hidden,
                               const std::string& weights, const std::string& tensors,
                               std::int64_t inter) {
  const std::int64_t h = model_.hidden_size;
  const std::string& pre = tensors;
  const int gate_up = tensor(pre + "gate_up", 2 * inter, l);
  const std::vector<int> gate_up_weights = {linear_weight(weights + "gate_proj", {inter, h}, l),
                                            linear_weight(weights + "up_proj", {inter, h}, l)};
  op(l,
     ops::GateUpProj{{x.gemm_rows(), gate_up, gate_up_weights, fp8_scales(l, x, gate_up_weights)}});
  const ProjectionInput act = projection_input(l, pre + "mlp_act", inter);
  op(l, ops::SiluAndMul{gate_up, act.rows, act.fp8});
  const int down = linear_weight(weights + "down_proj", {h, inter}, l);
  op(l, ops::DownProjResidual{{act.gemm_rows(), hidden, down, fp8_scales(l, act, {down})}});
}

}  // namespace

ModelProgram build_model_program(const EngineSpec& spec) {
  FF_CHECK(spec.model.num_layers > 0 &&
               static_cast<int>(spec.model.layers.size()) == spec.model.num_layers,
           ErrorCode::kInvalidArgument,
           "build_model_program needs a validated spec (layers resolved); use load_spec");
  return ProgramBuilder(spec).build();
}

}  // namespace freezeframe
