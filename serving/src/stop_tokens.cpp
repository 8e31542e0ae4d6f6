#include "freezeframe/serving/stop_tokens.h"

#include <algorithm>
#include <optional>

namespace freezeframe {

std::vector<std::int32_t> stop_tokens(const CheckpointConfig& config, const Tokenizer& tokenizer,
                                      bool chat) {
  std::vector<std::int32_t> stop;
  const auto add = [&](std::int32_t id) {
    if (id >= 0 && std::find(stop.begin(), stop.end(), id) == stop.end()) stop.push_back(id);
  };
  for (const std::int32_t id : config.eos_token_ids) add(id);
  add(tokenizer.eos_id());
  if (chat) {
    // Every chat format recognised (chat_format.h) is ChatML.
    if (const std::optional<TokenId> end = tokenizer.find("<|im_end|>")) add(*end);
  }
  return stop;
}

}  // namespace freezeframe
