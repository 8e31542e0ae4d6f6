#pragma once
// TextStream: a request's output tokens as text a client can be sent piece by piece. Bytes are
// passed on in whole UTF-8 characters (a character split across tokens waits for its last
// byte; a byte that can begin none becomes U+FFFD), and text that might be the start of a stop
// string is held back until it is known not to be one. A stop string found, across token
// boundaries or inside one token, ends the text before it; it is never sent.

#include <cstdint>
#include <string>
#include <vector>

#include "freezeframe/text/tokenizer.h"

namespace freezeframe {

class TextStream {
 public:
  /// `tokenizer` must outlive the stream. Special tokens (ChatML's <|im_end|>, the EOS) give no
  /// text, as Hugging Face's skip_special_tokens.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop);

  /// The text `token` completes that is safe to send now (possibly empty); a token outside the
  /// tokenizer's vocabulary is U+FFFD. After a stop string is found, every later token gives
  /// nothing.
  [[nodiscard]] std::string push(TokenId token);
  /// The text held back, at the end of the output (none after a stop string); a character cut
  /// short by the end becomes U+FFFD.
  [[nodiscard]] std::string finish();

  /// A stop string ended the text.
  [[nodiscard]] bool stopped() const { return stopped_; }
  /// Every byte of text sent so far, for a whole (not streamed) response.
  [[nodiscard]] const std::string& text() const { return sent_; }

 private:
  [[nodiscard]] std::string release(std::string piece);

  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  std::string bytes_;  // bytes not yet whole characters
  std::string held_;   // whole characters that may begin a stop string
  std::string sent_;
  bool stopped_ = false;
};

}  // namespace freezeframe
