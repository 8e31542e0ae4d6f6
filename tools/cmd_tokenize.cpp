// freezeframe tokenize MODEL --text TEXT [--chat] [--special]
// A text through a checkpoint's tokenizer (a GGUF file or a tokenizer.json): the ids, then each
// token's id, its spelling in the vocabulary and the bytes it stands for. No GPU.

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/text/chat_format.h"
#include "freezeframe/text/tokenizer.h"

namespace freezeframe::tools {

const std::string_view kTokenizeUsage =
    "usage: freezeframe tokenize MODEL --text TEXT [--chat] [--special]\n"
    "  MODEL      a GGUF checkpoint or a tokenizer.json (its tokenizer_config.json beside it\n"
    "             gives the chat template)\n"
    "  --text     the text to encode\n"
    "  --chat     TEXT as one user message, rendered by the model's chat template with the\n"
    "             generation prompt (ChatML templates), then encoded\n"
    "  --special  with the tokens the tokenizer puts around a text (a BOS, where it says so)\n"
    "  prints the ids, then each token's id, spelling and bytes\n";

namespace {

/// `text` padded with spaces to `width` characters (UTF-8 continuation bytes take no column).
std::string padded(const std::string& text, std::size_t width) {
  std::size_t chars = 0;
  for (const char c : text) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return chars < width ? text + std::string(width - chars, ' ') : text;
}

}  // namespace

int run_tokenize(Args args) {
  std::string model;
  std::optional<std::string> text;
  bool chat = false, special = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (is_help(a)) {
      std::printf("%.*s", int(kTokenizeUsage.size()), kTokenizeUsage.data());
      return 0;
    } else if (a == "--text") {
      text = std::string(take_value(args, i));
    } else if (a == "--chat") {
      chat = true;
    } else if (a == "--special") {
      special = true;
    } else if (a.empty() || a[0] == '-') {
      refuse(a);
    } else {
      if (!model.empty()) refuse(a, "one model at a time");
      model = std::string(a);
    }
  }
  if (model.empty()) throw UsageError("no model file given");
  if (!text) throw UsageError("--text TEXT is required");

  const Tokenizer tok = Tokenizer::open(model);
  std::printf("tokenizer: %s (%d tokens, pre-tokenizer %s)\n", printable(tok.source(), 200).c_str(),
              tok.vocab_size(), printable(tok.pre_tokenizer()).c_str());
  std::string input = *text;
  if (chat) {
    const ChatFormat format = tok.chat_format();
    const std::vector<ChatMessage> messages = {{"user", *text}};
    input = format.render(messages, true);
    std::printf("chat format: %s\n", format.name().c_str());
  }
  std::printf("text: %s\n", quote(input, 200).c_str());
  const std::vector<TokenId> ids = tok.encode(input, special);
  std::printf("%zu tokens:", ids.size());
  for (const TokenId id : ids) std::printf(" %d", id);
  std::printf("\n");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::printf("%6zu %8d  %s %s%s\n", i, ids[i],
                padded(printable(tok.token_text(ids[i])), 24).c_str(),
                quote(tok.token_bytes(ids[i])).c_str(), tok.is_special(ids[i]) ? "  special" : "");
  }
  return 0;
}

}  // namespace freezeframe::tools
