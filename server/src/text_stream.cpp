#include "freezeframe/server/text_stream.h"

#include <algorithm>

#include "freezeframe/base/utf8.h"

namespace freezeframe {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// Bytes a character that starts with `lead` takes (0 for a byte no character starts with).
std::size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

/// Whether `prefix` (shorter than its lead byte says) can still become a character: each byte
/// after the lead a continuation byte, the second within the range the lead allows (no
/// overlong form, no surrogate, nothing past U+10FFFF).
bool could_complete(std::string_view prefix) {
  const auto lead = static_cast<unsigned char>(prefix[0]);
  for (std::size_t i = 1; i < prefix.size(); ++i) {
    const auto b = static_cast<unsigned char>(prefix[i]);
    unsigned char lo = 0x80, hi = 0xBF;
    if (i == 1) {
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (b < lo || b > hi) return false;
  }
  return true;
}

/// Moves the whole characters at the front of `bytes` to `out`, invalid bytes as U+FFFD; what is
/// left is the start of a character still missing bytes (at most 3 bytes).
void take_whole(std::string& bytes, std::string& out) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t need = sequence_length(static_cast<unsigned char>(bytes[at]));
    if (need == 0) {
      out += kReplacement;
      ++at;
      continue;
    }
    if (bytes.size() - at < need) {
      // Keep the tail only when what is there can still become a character.
      if (!could_complete(std::string_view(bytes).substr(at))) {
        out += kReplacement;
        ++at;
        continue;
      }
      break;
    }
    const utf8::Char c = utf8::next(bytes, at);
    if (c.cp == utf8::kInvalid) {
      // One replacement for the lead and the continuation bytes that fit it (the maximal
      // subpart, as Python's errors="replace" decodes).
      std::size_t k = 1;
      while (k < need && could_complete(std::string_view(bytes).substr(at, k + 1))) ++k;
      out += kReplacement;
      at += k;
      continue;
    }
    out.append(bytes, at, c.bytes);
    at += c.bytes;
  }
  bytes.erase(0, at);
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {}

std::string TextStream::push(TokenId token) {
  if (stopped_) return {};
  // A model whose vocabulary is larger than the tokenizer's (a spec of random weights served
  // with another model's tokenizer) draws tokens the tokenizer cannot spell.
  if (token < 0 || token >= tokenizer_.vocab_size()) {
    bytes_ += kReplacement;
  } else if (tokenizer_.is_special(token)) {
    return {};
  } else {
    bytes_ += tokenizer_.token_bytes(token);
  }
  std::string whole;
  take_whole(bytes_, whole);
  return release(std::move(whole));
}

std::string TextStream::release(std::string piece) {
  held_ += piece;
  // The first stop string in what is held ends the text there.
  std::size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    std::string out = held_.substr(0, cut);
    held_.clear();
    bytes_.clear();
    stopped_ = true;
    sent_ += out;
    return out;
  }
  // Hold back the longest end of the text that begins some stop string.
  std::size_t keep = 0;
  for (const std::string& s : stop_) {
    for (std::size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  sent_ += out;
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  std::string out = std::move(held_);
  held_.clear();
  // A character the output ended inside.
  if (!bytes_.empty()) out += kReplacement;
  bytes_.clear();
  sent_ += out;
  return out;
}

}  // namespace freezeframe
