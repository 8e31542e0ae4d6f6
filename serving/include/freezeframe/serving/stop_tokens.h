#pragma once
// stop_tokens: the tokens that end a generation of a checkpoint's model, gathered from where
// checkpoints state them: the config's end-of-sequence tokens (config.json eos_token_id, GGUF
// eos and eot), the tokenizer's EOS, and in a chat the end of a turn of its template (ChatML's
// <|im_end|>, which a base model's EOS need not be: Qwen2's is <|endoftext|>).

#include <cstdint>
#include <vector>

#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/text/tokenizer.h"

namespace freezeframe {

/// Each once, in that order.
[[nodiscard]] std::vector<std::int32_t> stop_tokens(const CheckpointConfig& config,
                                                    const Tokenizer& tokenizer, bool chat);

}  // namespace freezeframe
