#pragma once
// The operands of each op of the model program, named: one struct per OpKind, built by the
// program and read by the runner by name. Tensor operands are indices into
// ModelProgram::tensors, weight operands indices into ModelProgram::weights. Each struct says
// which of its operands it reads and which it writes (access()), from which the program lists
// them for the planner's lifetimes.

#include <variant>
#include <vector>

namespace freezeframe {

enum class OpKind {
  kEmbedding,         ///< hidden = embed_tokens[token_ids]
  kRmsNorm,           ///< out = rms_norm(in) · weight (and/or its fp8 rows, Fp8Rows)
  kQuantizeRows,      ///< out = fp8(in / scale), scale = max|row| / 448 per row (W8A8 inputs)
  kQkvProj,           ///< qkv = x · W_qkvᵀ   [T, (H + 2·KV)·D]
  kQkvBias,           ///< qkv += (b_q, b_k, b_v), each row
  kRope,              ///< rotary embedding of q and k inside qkv, in place
  kCacheWrite,        ///< k, v of qkv → the layer's KV cache at the slot mapping
  kAttention,         ///< out = attention(q, cache) through the layer's backend
  kOProjResidual,     ///< hidden += attn_out · W_oᵀ
  kGateUpProj,        ///< gate_up = x · W_gate_upᵀ   [T, 2·I]
  kSiluAndMul,        ///< act = silu(gate) · up   [T, I] (and/or its fp8 rows, Fp8Rows)
  kDownProjResidual,  ///< hidden += act · W_downᵀ
  /// hidden += Σ over each token's top-k experts of weight · expert(x) (a MoE layer's routed
  /// experts)
  kMoeExperts,
  kMlaQProj,      ///< q_a = rms_norm(x · W_q_aᵀ) (q_lora; the rest is the MLA impl's)
  kMlaKvAProj,    ///< kv_a = x · W_kv_aᵀ   [T, R + rope]
  kMlaKvANorm,    ///< kv_c_normed = rms_norm(kv_a[:, :R])
  kMlaAttention,  ///< MLA forward: rope, latent cache write, attention, W_UV
  kFinalNorm,     ///< normed = rms_norm(hidden[lm_head_rows]): each sequence's last token
  kLmHead,        ///< logits = normed · W_lm_headᵀ
  kSample,        ///< sampled_token_ids = a draw from each row of logits (sampler.h)
  kAllReduce,     ///< hidden = Σ over the tensor-parallel ranks of hidden (T > 1)
  kGatherLogits,  ///< logits = every rank's logits_shard side by side, padding dropped
  /// DCP (D > 1): q_group = the queries of every rank of this rank's DCP group, side by side
  /// in rank order (all-gathered through its send and receive buffers).
  kDcpGatherQueries,
  /// DCP: the group's queries against this rank's shard of the cache: partial outputs and
  /// their LSE (f32 [T, group heads]).
  kDcpAttention,
  kDcpMlaAttention,  ///< DCP: the MLA forward over this rank's shard, partial outputs and LSE
  /// DCP: attn_out = this rank's heads of the group's partial outputs, merged by their LSEs
  /// (each rank's heads sent to it by an all-to-all, then merge_attention_states).
  kDcpMerge,
};

/// What an op reads and writes (in place: both) and the weights it uses.
struct OpAccess {
  std::vector<int> reads;
  std::vector<int> writes;
  std::vector<int> weights;
};

namespace ops {

struct Embedding {
  static constexpr OpKind kKind = OpKind::kEmbedding;
  int token_ids, hidden, table;
  [[nodiscard]] OpAccess access() const { return {{token_ids}, {hidden}, {table}}; }
};
/// With fp8 projections, an op's output rows quantised by the op itself for the projection
/// that reads them (the quantisation fused into the norm or SiLU·mul before it): fp8 rows and a
/// scale per row (max|row| / 448, as QuantizeRows writes them).
struct Fp8Rows {
  int rows = -1, scale = -1;
  [[nodiscard]] bool defined() const { return rows >= 0; }
  void add_writes(OpAccess& a) const {
    if (defined()) a.writes.insert(a.writes.end(), {rows, scale});
  }
};
/// `out` is -1 where only the fp8 rows are read.
struct RmsNorm {
  static constexpr OpKind kKind = OpKind::kRmsNorm;
  int in, out, weight;
  Fp8Rows fp8 = {};
  [[nodiscard]] OpAccess access() const {
    OpAccess a{{in}, {}, {weight}};
    if (out >= 0) a.writes.push_back(out);
    fp8.add_writes(a);
    return a;
  }
};
/// An fp8 copy of `in` and each row's scale, for the fp8 projection that reads it.
struct QuantizeRows {
  static constexpr OpKind kKind = OpKind::kQuantizeRows;
  int in, out, scale;
  [[nodiscard]] OpAccess access() const { return {{in}, {out, scale}, {}}; }
};
/// With fp8 projections (model.quantization: fp8), what scales an fp8 GEMM's operands: its
/// input's per-row scales (a QuantizeRows op's or an Fp8Rows') and each weight's
/// per-output-channel scales.
struct Fp8Scales {
  int in_scale = -1;
  std::vector<int> weight_scales;  ///< one per weight, in the weights' order
  [[nodiscard]] bool defined() const { return in_scale >= 0; }
};
/// out = in · Wᵀ, the weights' rows stacked (q, k, v; gate, up) into one GEMM.
struct Projection {
  int in, out;
  std::vector<int> weights;
  Fp8Scales fp8 = {};
  [[nodiscard]] OpAccess access() const {
    OpAccess a{{in}, {out}, weights};
    if (fp8.defined()) {
      a.reads.push_back(fp8.in_scale);
      a.weights.insert(a.weights.end(), fp8.weight_scales.begin(), fp8.weight_scales.end());
    }
    return a;
  }
};
struct QkvProj : Projection {
  static constexpr OpKind kKind = OpKind::kQkvProj;
};
struct GateUpProj : Projection {
  static constexpr OpKind kKind = OpKind::kGateUpProj;
};
struct MlaKvAProj : Projection {
  static constexpr OpKind kKind = OpKind::kMlaKvAProj;
};
struct QkvBias {
  static constexpr OpKind kKind = OpKind::kQkvBias;
  int qkv, q_bias, k_bias, v_bias;
  [[nodiscard]] OpAccess access() const { return {{qkv}, {qkv}, {q_bias, k_bias, v_bias}}; }
};
struct Rope {
  static constexpr OpKind kKind = OpKind::kRope;
  int qkv, positions;
  [[nodiscard]] OpAccess access() const { return {{qkv, positions}, {qkv}, {}}; }
};
struct CacheWrite {
  static constexpr OpKind kKind = OpKind::kCacheWrite;
  int qkv;
  [[nodiscard]] OpAccess access() const { return {{qkv}, {}, {}}; }
};
struct Attention {
  static constexpr OpKind kKind = OpKind::kAttention;
  int qkv, out;
  [[nodiscard]] OpAccess access() const { return {{qkv}, {out}, {}}; }
};
struct DcpAttention {
  static constexpr OpKind kKind = OpKind::kDcpAttention;
  int qkv, q_group, partial, lse;
  [[nodiscard]] OpAccess access() const { return {{qkv, q_group}, {partial, lse}, {}}; }
};
/// hidden += in · Wᵀ (rank 0 adds the residual; the others their partial sums only).
struct ResidualProjection {
  int in, hidden, weight;
  Fp8Scales fp8 = {};
  [[nodiscard]] OpAccess access() const {
    OpAccess a{{in, hidden}, {hidden}, {weight}};
    if (fp8.defined()) {
      a.reads.push_back(fp8.in_scale);
      a.weights.insert(a.weights.end(), fp8.weight_scales.begin(), fp8.weight_scales.end());
    }
    return a;
  }
};
struct OProjResidual : ResidualProjection {
  static constexpr OpKind kKind = OpKind::kOProjResidual;
};
struct DownProjResidual : ResidualProjection {
  static constexpr OpKind kKind = OpKind::kDownProjResidual;
};
/// `act` is -1 where only the fp8 rows are read.
struct SiluAndMul {
  static constexpr OpKind kKind = OpKind::kSiluAndMul;
  int gate_up, act;
  Fp8Rows fp8 = {};
  [[nodiscard]] OpAccess access() const {
    OpAccess a{{gate_up}, {}, {}};
    if (act >= 0) a.writes.push_back(act);
    fp8.add_writes(a);
    return a;
  }
};
/// A MoE layer's routed experts: the router's logits (f32 [T, E]), each token's top-k experts
/// and their weights ([T, k]), the T·k (token, slot) rows ordered by expert (their experts and
/// row numbers, [T, k] i32 each), and the experts' gate_up, act and down outputs ([T·k, ·],
/// kept [T, k·width]), summed back into hidden by the weights.
struct MoeExperts {
  static constexpr OpKind kKind = OpKind::kMoeExperts;
  int in, hidden;
  int router_logits, topk_ids, topk_weights, sorted_ids, sorted_rows, gate_up, act, expert_out;
  int router;                ///< weight [E, hidden]
  std::vector<int> experts;  ///< gate_proj, up_proj, down_proj of expert 0, then 1, ...
  [[nodiscard]] OpAccess access() const {
    OpAccess a{{in, hidden},
               {hidden, router_logits, topk_ids, topk_weights, sorted_ids, sorted_rows, gate_up,
                act, expert_out},
               {router}};
    a.weights.insert(a.weights.end(), experts.begin(), experts.end());
    return a;
  }
};
struct MlaQProj {
  static constexpr OpKind kKind = OpKind::kMlaQProj;
  int x, q_a, q_a_proj, q_a_norm;
  [[nodiscard]] OpAccess access() const { return {{x}, {q_a}, {q_a_proj, q_a_norm}}; }
};
struct MlaKvANorm {
  static constexpr OpKind kKind = OpKind::kMlaKvANorm;
  int kv_a, kv_c, weight;
  [[nodiscard]] OpAccess access() const { return {{kv_a}, {kv_c}, {weight}}; }
};
/// The MLA impl's inputs: the query's input (x, or the q_lora latent), the normed latent, kv_a
/// again for k_pe (its last rope columns) and the positions; it owns q_proj and kv_b_proj.
struct MlaInputs {
  int query_in, kv_c, kv_a, positions, q_proj, kv_b_proj;
};
struct MlaAttention {
  static constexpr OpKind kKind = OpKind::kMlaAttention;
  MlaInputs in;
  int out;
  [[nodiscard]] OpAccess access() const {
    return {{in.query_in, in.kv_c, in.kv_a, in.positions}, {out}, {in.q_proj, in.kv_b_proj}};
  }
};
struct DcpMlaAttention {
  static constexpr OpKind kKind = OpKind::kDcpMlaAttention;
  MlaInputs in;
  int partial, lse;
  [[nodiscard]] OpAccess access() const {
    return {
        {in.query_in, in.kv_c, in.kv_a, in.positions}, {partial, lse}, {in.q_proj, in.kv_b_proj}};
  }
};
struct FinalNorm {
  static constexpr OpKind kKind = OpKind::kFinalNorm;
  int hidden, lm_head_rows, normed, weight;
  [[nodiscard]] OpAccess access() const { return {{hidden, lm_head_rows}, {normed}, {weight}}; }
};
struct LmHead {
  static constexpr OpKind kKind = OpKind::kLmHead;
  int normed, logits, weight;  ///< logits: the whole logits, or this rank's shard (T > 1)
  [[nodiscard]] OpAccess access() const { return {{normed}, {logits}, {weight}}; }
};
struct Sample {
  static constexpr OpKind kKind = OpKind::kSample;
  int logits, params, sampled;
  [[nodiscard]] OpAccess access() const { return {{logits, params}, {sampled}, {}}; }
};
struct AllReduce {
  static constexpr OpKind kKind = OpKind::kAllReduce;
  int hidden;
  [[nodiscard]] OpAccess access() const { return {{hidden}, {hidden}, {}}; }
};
struct GatherLogits {
  static constexpr OpKind kKind = OpKind::kGatherLogits;
  int shard, gathered, logits;
  [[nodiscard]] OpAccess access() const { return {{shard}, {gathered, logits}, {}}; }
};
struct DcpGatherQueries {
  static constexpr OpKind kKind = OpKind::kDcpGatherQueries;
  int qkv, q_group, send, recv;
  [[nodiscard]] OpAccess access() const { return {{qkv}, {q_group, send, recv}, {}}; }
};
struct DcpMerge {
  static constexpr OpKind kKind = OpKind::kDcpMerge;
  int partial, lse, out, out_send, lse_send, out_recv, lse_recv;
  [[nodiscard]] OpAccess access() const {
    return {{partial, lse}, {out, out_send, lse_send, out_recv, lse_recv}, {}};
  }
};

}  // namespace ops

using OpOperands =
    std::variant<ops::Embedding, ops::RmsNorm, ops::QuantizeRows, ops::QkvProj, ops::QkvBias,
                 ops::Rope, ops::CacheWrite, ops::Attention, ops::OProjResidual, ops::GateUpProj,
                 ops::SiluAndMul, ops::DownProjResidual, ops::MoeExperts, ops::MlaQProj,
                 ops::MlaKvAProj, ops::MlaKvANorm, ops::MlaAttention, ops::FinalNorm, ops::LmHead,
                 ops::Sample, ops::AllReduce, ops::GatherLogits, ops::DcpGatherQueries,
                 ops::DcpAttention, ops::DcpMlaAttention, ops::DcpMerge>;

}  // namespace freezeframe
