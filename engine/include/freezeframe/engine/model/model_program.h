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
// With decode context parallelism the queries are gathered over the DCP group, each attention
// op (dcp_attention, dcp_mla_attention) writes partial outputs and their LSE (f32 [T, heads]),
// and dcp_merge gives each rank its heads merged across the group.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "freezeframe/base/dtype.h"
#include "freezeframe/engine/model/program_ops.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/memory/lifetime_packer.h"

namespace freezeframe {

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
  /// ≥ 0: this is the per-output-channel scales (f32 [rows]) of that fp8 weight, computed
  /// when the weight is quantised (a checkpoint is not asked for it).
  int scales_of = -1;

  [[nodiscard]] std::int64_t bytes() const;
};

/// One op: its operands by name (program_ops.h) and, derived from them, the lists the planner
/// reads lifetimes from.
struct ProgramOp {
  int layer = -1;
  OpOperands operands;
  std::vector<int> reads;    ///< indices into ModelProgram::tensors
  std::vector<int> writes;   ///< indices into ModelProgram::tensors (in place = read and write)
  std::vector<int> weights;  ///< indices into ModelProgram::weights

  template <class Operands>
  ProgramOp(int op_layer, Operands o) : layer(op_layer), operands(std::move(o)) {
    OpAccess a = std::get<Operands>(operands).access();
    reads = std::move(a.reads);
    writes = std::move(a.writes);
    weights = std::move(a.weights);
  }
  [[nodiscard]] OpKind kind() const {
    return std::visit([](const auto& o) { return o.kKind; }, operands);
  }
  /// The operands of an op of kind Operands::kKind (std::bad_variant_access otherwise).
  template <class Operands>
  [[nodiscard]] const Operands& as() const {
    return std::get<Operands>(operands);
  }
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
