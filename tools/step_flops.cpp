#include "step_flops.h"

#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/serving/step_work.h"

namespace freezeframe::tools {

StepFlops prefill_flops(const EngineSpec& spec, std::int64_t b, std::int64_t n,
                        std::int64_t context) {
  const ModelSpec& m = spec.model;
  // Matrices of the layers (norm weights are vectors); the embedding is a lookup.
  double layer_params = 0;
  for (const ProgramWeight& w : build_model_program(spec).weights) {
    if (w.layer >= 0 && w.shape.size() == 2)
      layer_params += double(w.shape[0]) * double(w.shape[1]);
  }
  const double lm_head_params = double(m.vocab_size) * double(m.hidden_size);
  StepFlops f;
  f.dense = 2.0 * layer_params * double(b * n) + 2.0 * lm_head_params * double(b);
  const double per_pair =
      m.is_mla() ? 2.0 * m.num_heads *
                       (m.mla->qk_nope_head_dim + m.mla->qk_rope_head_dim + m.mla->v_head_dim)
                 : 4.0 * m.num_heads * m.head_size;
  for (const LayerSpec& layer : m.layers) {
    // Bidirectional layers (encoders) see every key.
    const double pairs = layer.attention_type == AttentionType::kDecoder
                             ? double(causal_pairs(context, n, layer.sliding_window))
                             : double(n) * double(context + n);
    f.attention += per_pair * pairs * double(b);
  }
  return f;
}

}  // namespace freezeframe::tools
