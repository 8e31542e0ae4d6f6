// checkpoints/: DeepSeek-V2's config.json — the published DeepSeek-V2-Lite config (latent
// attention without query compression, 64 experts of which 6 a token and 2 shared, a dense
// first layer, YaRN scaling), the full DeepSeek-V2's group-limited router and compressed query,
// and what the model program would compute otherwise refused by field, file, line and column.

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "checkpoints/checkpoint_config_support.h"
#include "freezeframe/checkpoints/checkpoint_config.h"

namespace freezeframe {
namespace {

using config_testing::kFixtures;
using config_testing::refusal;
using config_testing::write_text;

/// DeepSeek-V2-Lite's config.json with each `{key, line}` swapped in for the line holding the
/// key, at any depth (an empty line drops it; a key it lacks is added after the first line).
std::string lite_config(std::initializer_list<std::pair<std::string, std::string>> edits = {}) {
  std::ifstream in(kFixtures / "deepseek-v2-lite" / "config.json");
  std::string text, row;
  std::vector<bool> used(edits.size(), false);
  while (std::getline(in, row)) {
    bool replaced = false;
    std::size_t i = 0;
    for (const auto& [key, line] : edits) {
      const std::size_t start = row.find_first_not_of(' ');
      if (start != std::string::npos &&
          row.compare(start, key.size() + 3, "\"" + key + "\":") == 0) {
        if (!line.empty()) text += "  " + line + "\n";
        used[i] = replaced = true;
      }
      ++i;
    }
    if (!replaced) text += row + "\n";
  }
  std::size_t i = 0;
  for (const auto& [key, line] : edits) {
    if (!used[i++] && !line.empty()) text.insert(text.find('\n') + 1, "  " + line + "\n");
  }
  return text;
}

TEST(DeepseekConfig, ReadsDeepSeekV2Lite) {
  const CheckpointConfig c = read_checkpoint_config((kFixtures / "deepseek-v2-lite").string());
  EXPECT_EQ(c.architecture, "DeepseekV2ForCausalLM");
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV2);
  EXPECT_EQ(to_string(c.family), "deepseek_v2");
  EXPECT_EQ(c.num_layers, 27);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.head_size, 192) << "qk_nope_head_dim + qk_rope_head_dim";
  EXPECT_EQ(c.intermediate_size, 10944);
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.rope_scaling.has_value());
  ASSERT_TRUE(c.mla.has_value());
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.mla->q_lora_rank, 0) << "null: the query is not compressed";
  EXPECT_EQ(c.mla->qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla->v_head_dim, 128);
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->num_experts, 64);
  EXPECT_EQ(c.moe->experts_per_token, 6);
  EXPECT_EQ(c.moe->intermediate_size, 1408);
  EXPECT_EQ(c.moe->num_shared_experts, 2);
  EXPECT_EQ(c.moe->first_dense_layers, 1);
  EXPECT_EQ(c.moe->routed_scaling_factor, 1.0);
  EXPECT_EQ(c.moe->num_groups, 1);
  EXPECT_EQ(c.moe->top_groups, 1);
  EXPECT_FALSE(c.moe->is_moe_layer(0));
  EXPECT_TRUE(c.moe->is_moe_layer(1));
  EXPECT_TRUE(c.moe->is_moe_layer(26));
  ASSERT_TRUE(c.yarn_rope_scaling.has_value());
  EXPECT_EQ(c.yarn_rope_scaling->factor, 40.0);
  EXPECT_EQ(c.yarn_rope_scaling->original_max_position_embeddings, 4096);
  EXPECT_EQ(c.yarn_rope_scaling->beta_fast, 32.0);
  EXPECT_EQ(c.yarn_rope_scaling->beta_slow, 1.0);
  EXPECT_EQ(c.yarn_rope_scaling->mscale, 0.707);
  EXPECT_EQ(c.yarn_rope_scaling->mscale_all_dim, 0.707);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int32_t>{100001});
  EXPECT_EQ(c.origins.at("head_size"),
            c.config_file + ":35:23: qk_nope_head_dim + qk_rope_head_dim");
}

// DeepSeek-V2 (236B) as published: a compressed query, 160 experts in 8 groups of which a
// token's 6 come from the best 3, scaled by 16.
TEST(DeepseekConfig, ReadsTheFullModelsGroupLimitedRouter) {
  const std::string json =
      write_text("deepseek-v2.json",
                 lite_config({{"q_lora_rank", "\"q_lora_rank\": 1536,"},
                              {"n_routed_experts", "\"n_routed_experts\": 160,"},
                              {"n_group", "\"n_group\": 8,"},
                              {"topk_group", "\"topk_group\": 3,"},
                              {"topk_method", "\"topk_method\": \"group_limited_greedy\","},
                              {"routed_scaling_factor", "\"routed_scaling_factor\": 16.0,"}}));
  const CheckpointConfig c = read_checkpoint_config(json);
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.moe->num_experts, 160);
  EXPECT_EQ(c.moe->num_groups, 8);
  EXPECT_EQ(c.moe->top_groups, 3);
  EXPECT_EQ(c.moe->routed_scaling_factor, 16.0);
}

// A config.json a transformers config class wrote with its defaults left out.
TEST(DeepseekConfig, TakesTransformersDefaults) {
  std::string text = lite_config({{"q_lora_rank", ""},
                                  {"kv_lora_rank", ""},
                                  {"n_shared_experts", ""},
                                  {"first_k_dense_replace", ""},
                                  {"moe_intermediate_size", ""}});
  // Without rope_scaling, the whole object.
  const std::size_t begin = text.find("  \"rope_scaling\": {");
  ASSERT_NE(begin, std::string::npos);
  text.erase(begin, text.find("},\n", begin) + 3 - begin);
  const CheckpointConfig c = read_checkpoint_config(write_text("defaults.json", text));
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.moe->num_shared_experts, 2);
  EXPECT_EQ(c.moe->first_dense_layers, 0);
  EXPECT_EQ(c.moe->intermediate_size, 1407);
  EXPECT_FALSE(c.yarn_rope_scaling.has_value());
}

struct Refusal {
  const char* key;
  const char* line;
  const char* expected;
};

TEST(DeepseekConfig, RefusesWhatTheProgramWouldComputeOtherwise) {
  for (const Refusal r : {
           Refusal{"scoring_func", "\"scoring_func\": \"sigmoid\",",
                   "scoring_func: the string 'sigmoid' is not supported (the router takes the "
                   "softmax of its logits); supported: softmax"},
           Refusal{"norm_topk_prob", "\"norm_topk_prob\": true,",
                   "norm_topk_prob: 'true' is not supported (the chosen experts' weights are "
                   "not renormalised, as transformers computes them); supported: false"},
           Refusal{"moe_layer_freq", "\"moe_layer_freq\": 2,",
                   "moe_layer_freq: '2' is not supported (every layer from "
                   "first_k_dense_replace on has the experts"},
           Refusal{"topk_method", "\"topk_method\": \"noaux_tc\",",
                   "topk_method: 'noaux_tc' is not supported; supported: greedy, "
                   "group_limited_greedy"},
           Refusal{"num_experts_per_tok", "\"num_experts_per_tok\": 65,",
                   "num_experts_per_tok: is 65, more than the 64 experts (n_routed_experts)"},
           Refusal{"num_experts_per_tok", "", "num_experts_per_tok: is required but missing"},
           Refusal{"first_k_dense_replace", "\"first_k_dense_replace\": 28,",
                   "first_k_dense_replace: is 28, more than the 27 layers"},
           Refusal{"attention_bias", "\"attention_bias\": true,",
                   "attention_bias: 'true' is not supported (the latent projections have no "
                   "bias); supported: false"},
           Refusal{"qk_rope_head_dim", "\"qk_rope_head_dim\": 63,",
                   "qk_rope_head_dim: must be even (RoPE rotates pairs), got 63"},
           Refusal{"type", "\"type\": \"llama3\"",
                   "rope_scaling.type: RoPE scaling 'llama3' is not supported; supported: "
                   "default, yarn"},
           Refusal{"mscale_all_dim", "\"mscale_all_dim\": 0.707, \"truncate\": false,",
                   "rope_scaling.truncate: is not supported with YaRN scaling"},
           Refusal{"factor", "", "rope_scaling.factor: is required but missing"},
       }) {
    SCOPED_TRACE(r.expected);
    const std::string json = write_text("refused.json", lite_config({{r.key, r.line}}));
    const std::string m = refusal(json);
    EXPECT_NE(m.find(json + ":"), std::string::npos) << m;
    EXPECT_NE(m.find(r.expected), std::string::npos) << m;
  }
}

TEST(DeepseekConfig, RefusesGroupsThatCannotHoldTheExperts) {
  auto refused = [](std::initializer_list<std::pair<std::string, std::string>> edits) {
    return refusal(write_text("groups.json", lite_config(edits)));
  };
  const auto limited = std::pair<std::string, std::string>{
      "topk_method", "\"topk_method\": \"group_limited_greedy\","};
  std::string m = refused({limited, {"n_group", "\"n_group\": 5,"}});
  EXPECT_NE(m.find("n_group: 5 groups do not divide the 64 experts (n_routed_experts)"),
            std::string::npos)
      << m;
  m = refused({limited, {"n_group", "\"n_group\": 8,"}, {"topk_group", "\"topk_group\": 9,"}});
  EXPECT_NE(m.find("topk_group: must be in [1, 8], got '9'"), std::string::npos) << m;
  m = refused({limited, {"n_group", "\"n_group\": 16,"}, {"topk_group", "\"topk_group\": 1,"}});
  EXPECT_NE(m.find("topk_group: 1 groups of 4 experts hold fewer than the 6 a token takes"),
            std::string::npos)
      << m;
  m = refused({limited, {"n_group", ""}});
  EXPECT_NE(m.find("n_group: is required but missing"), std::string::npos) << m;
}

// YaRN is read where the model program applies it, DeepSeek-V2's latent attention, only.
TEST(DeepseekConfig, YarnIsRefusedForOtherFamilies) {
  std::string text = config_testing::llama_config();
  const std::string llama3 = "\"rope_type\": \"llama3\"";
  ASSERT_NE(text.find(llama3), std::string::npos);
  text.replace(text.find(llama3), llama3.size(), "\"rope_type\": \"yarn\"");
  const std::string json = write_text("llama-yarn.json", text);
  const std::string m = refusal(json);
  EXPECT_NE(m.find("rope_scaling.rope_type: RoPE scaling 'yarn' is not supported; supported: "
                   "default, llama3"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace freezeframe
