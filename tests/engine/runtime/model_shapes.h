#pragma once
// Model sections of specs that the engine's multi-rank tests share.

#include <string>

namespace freezeframe::testing {

/// DeepSeek-V2-Lite's attention and dense MLP, two layers (hidden 2048, 16 heads, latent 512
/// and rope 64, MLP 10944, vocabulary 102400): its query uncompressed (q_lora_rank 0, V2-Lite's)
/// or through a latent of q_lora_rank (DeepSeek-V2's 1536). Every rank holds the whole latent
/// cache's shape, so a DCP group may be the whole tensor-parallel group. `backend`: an MLA one.
inline std::string deepseek_v2_lite_shaped_model(int q_lora_rank = 0,
                                                 const std::string& backend = "reference_mla") {
  return "model:\n"
         "  name: deepseek-v2-lite-shaped\n"
         "  num_layers: 2\n"
         "  hidden_size: 2048\n"
         "  num_heads: 16\n"
         "  intermediate_size: 10944\n"
         "  vocab_size: 102400\n"
         "  tie_word_embeddings: false\n"
         "  dtype: bf16\n"
         "  rope_theta: 10000\n"
         "  max_position_embeddings: 2048\n"
         "  mla:\n"
         "    kv_lora_rank: 512\n"
         "    q_lora_rank: " +
         (q_lora_rank > 0 ? std::to_string(q_lora_rank) : std::string("null")) +
         "\n"
         "    qk_nope_head_dim: 128\n"
         "    qk_rope_head_dim: 64\n"
         "    v_head_dim: 128\n"
         "  attention:\n"
         "    backend: " +
         backend + "\n";
}

}  // namespace freezeframe::testing
