#pragma once
// The model program: the built-in decoder as an ordered list of ops, each naming the tensors
// it reads and writes and the weights it uses. The planner derives activation lifetimes and
// weight sizes from it; the engine executes the same list, so the plan and the run cannot
// disagree about what exists.
//
// Per layer (Llama-style):  rms_norm → qkv_proj (→ qkv_bias, when the checkpoint's q, k and
//   v projections have biases: Qwen2) → rope → cache_write → attention → o_proj (+ residual)
//   → rms_norm → gate_up_proj → silu_and_mul → down_proj (+ residual).
// MLA layers (DeepSeek-V2 without q_lora):  rms_norm → q_proj and kv_a_proj_with_mqa →
//   kv_a_layernorm → mla_attention (rope, latent cache write, absorbed/expanded attention;
//   the impl owns q_proj and kv_b_proj) → o_proj (+ residual), then the MLP when present.
// Around the layers: embedding first; final_norm and lm_head (last token of each sequence);
// then sample, each sequence's next token drawn from its logits (run only when the engine
// samples, EngineOptions::sample_tokens; its buffers are planned either way).
// Over T tensor-parallel ranks (tensor_parallel.h) every rank runs the same program on its
// shard: the embedding gives zeros for tokens outside its vocabulary rows, o_proj and down_proj
// add this rank's partial sums (rank 0 adds the residual too), and an all_reduce after each of
// the three makes the residual stream whole on every rank; the LM head's vocabulary rows are
// gathered into the logits (gather_logits), so every rank samples the same tokens.
// With decode context parallelism each attention op also writes its LSE (f32 [T, heads]) for
// the merge across ranks.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/base/dtype.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/memory/lifetime_packer.h"

namespace freezeframe {

enum class OpKind {
  kEmbedding,         ///< hidden = embed_tokens[token_ids]
  kRmsNorm,           ///< out = rms_norm(in) · weight
  kQkvProj,           ///< qkv = x · W_qkvᵀ   [T, (H + 2·KV)·D]
  kQkvBias,           ///< qkv += (b_q, b_k, b_v), each row
  kRope,              ///< rotary embedding of q and k inside qkv, in place
  kCacheWrite,        ///< k, v of qkv → the layer's KV cache at the slot mapping
  kAttention,         ///< out = attention(q, cache) through the layer's backend
  kOProjResidual,     ///< hidden += attn_out · W_oᵀ
  kGateUpProj,        ///< gate_up = x · W_gate_upᵀ   [T, 2·I]
  kSiluAndMul,        ///< act = silu(gate) · up   [T, I]
  kDownProjResidual,  ///< hidden += act · W_downᵀ
  kMlaQProj,          ///< q = x · W_qᵀ (owned by the MLA impl; listed for its weight)
  kMlaKvAProj,        ///< kv_a = x · W_kv_aᵀ   [T, R + rope]
  kMlaKvANorm,        ///< kv_c_normed = rms_norm(kv_a[:, :R])
  kMlaAttention,      ///< MLA forward: rope, latent cache write, attention, W_UV
  kFinalNorm,         ///< normed = rms_norm(hidden[lm_head_rows]): each sequence's last token
  kLmHead,            ///< logits = normed · W_lm_headᵀ
  kSample,            ///< sampled_token_ids = a draw from each row of logits (sampler.h)
  kAllReduce,         ///< hidden = Σ over the tensor-parallel ranks of hidden (T > 1)
  kGatherLogits,      ///< logits = every rank's logits_shard side by side, padding dropped
  /// DCP (D > 1): q_group = the queries of every rank of this rank's DCP group, side by side
  /// in rank order (all-gathered; writes its send and receive buffers too).
  kDcpGatherQueries,
  /// DCP: attn_out = this rank's heads of the group's partial outputs, merged by their LSEs
  /// (each rank's heads sent to it by an all-to-all, then merge_attention_states).
  kDcpMerge,
};
[[nodiscard]] std::string_view to_string(OpKind kind);

/// Where a program tensor lives.
enum class TensorHome {
  kActivation,  ///< packed by lifetime in the activation region (attention outputs too)
  kInput,       ///< per-step input at a fixed address (written by the host each step)
  kOutput,      ///< per-step output at a fixed address (read by the caller)
};

/// How a tensor's rows scale with the step.
enum class Rows {
  kTokens,     ///< one row per token of the step (up to max_num_batched_tokens)
  kSequences,  ///< one row per sequence of the step (up to max_num_seqs)
};

struct ProgramTensor {
  std::string name;  ///< "layers.3.qkv"
  DType dtype = DType::kBF16;
  Rows rows = Rows::kTokens;
  std::int64_t width = 0;  ///< elements per row
  TensorHome home = TensorHome::kActivation;
  int layer = -1;  ///< −1 outside the layers

  /// Bytes for a step of `tokens` tokens and `sequences` sequences.
  [[nodiscard]] std::int64_t bytes(std::int64_t tokens, std::int64_t sequences) const {
    return (rows == Rows::kTokens ? tokens : sequences) * width *
           static_cast<std::int64_t>(size_of(dtype));
  }
};

struct ProgramWeight {
  /// "layers.3.mlp.down_proj", "layers.3.self_attn.q_proj.bias": Hugging Face's names without
  /// "model." and ".weight" (hf_weight_name in weight_source.h gives the whole name).
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<std::int64_t> shape;
  int layer = -1;

  [[nodiscard]] std::int64_t bytes() const;
};

struct ProgramOp {
  OpKind kind = OpKind::kRmsNorm;
  int layer = -1;
  std::vector<int> reads;    ///< indices into ModelProgram::tensors
  std::vector<int> writes;   ///< indices into ModelProgram::tensors (in place = read and write)
  std::vector<int> weights;  ///< indices into ModelProgram::weights
};

struct ModelProgram {
  std::vector<ProgramTensor> tensors;
  std::vector<ProgramWeight> weights;
  std::vector<ProgramOp> ops;

  /// First and last op touching each tensor (−1, −1 for an unused tensor).
  struct Lifetime {
    int first_op = -1;
    int last_op = -1;
  };
  [[nodiscard]] std::vector<Lifetime> lifetimes() const;
  [[nodiscard]] std::int64_t weight_bytes() const;
  /// Index of the tensor called `name`; throws kNotFound.
  [[nodiscard]] int tensor_index(std::string_view name) const;
};

/// The lifetimes of the program's activation tensors (TensorHome::kActivation) for a step of
/// `tokens` tokens and `sequences` sequences, steps being op indices; `tensor_ids`, when given,
/// receives the program tensor index of each.
[[nodiscard]] std::vector<TensorLifetime> activation_lifetimes(
    const ModelProgram& program, std::int64_t tokens, std::int64_t sequences,
    std::vector<int>* tensor_ids = nullptr);

/// The program of `spec`'s model (the spec must be validated: load_spec / parse_spec).
[[nodiscard]] ModelProgram build_model_program(const EngineSpec& spec);

}  // namespace freezeframe
