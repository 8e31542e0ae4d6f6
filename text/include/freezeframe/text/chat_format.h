#pragma once
// ChatFormat: a conversation rendered as a checkpoint's chat template would render it, for the
// templates recognised from their text (no Jinja engine): ChatML,
//
//   <|im_start|>{role}\n{content}<|im_end|>\n ...   and the generation prompt
//   <|im_start|>assistant\n
//
// with or without a default system message put first when the conversation has none (SmolLM2's
// template). A template is recognised after its whitespace, trim markers and string
// concatenations are normalised away, as Hugging Face renders it (trim_blocks, lstrip_blocks);
// any other template is refused, naming where it came from.

#include <span>
#include <string>
#include <string_view>

namespace freezeframe {

struct ChatMessage {
  std::string role;  ///< "system", "user", "assistant", ...
  std::string content;
};

class ChatFormat {
 public:
  /// The format of `template_text`; `where` names the template in messages ("FILE:
  /// tokenizer.chat_template"). Throws kUnsupported for a template it does not recognise.
  [[nodiscard]] static ChatFormat recognise(std::string_view template_text, std::string_view where);

  /// The conversation as text, ending in the generation prompt when `add_generation_prompt`.
  /// Encode it with its special tokens matched (Tokenizer::encode does) and without
  /// add_special, as Hugging Face's apply_chat_template does.
  [[nodiscard]] std::string render(std::span<const ChatMessage> messages,
                                   bool add_generation_prompt) const;

  /// "chatml" or "chatml with a default system message".
  [[nodiscard]] const std::string& name() const { return name_; }
  /// The system message put first when the conversation starts with another role; empty when
  /// the template has none.
  [[nodiscard]] const std::string& default_system() const { return default_system_; }

 private:
  ChatFormat() = default;
  std::string name_;
  std::string default_system_;
  bool has_default_system_ = false;
};

}  // namespace freezeframe
