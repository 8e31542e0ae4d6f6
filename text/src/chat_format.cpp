#include "freezeframe/text/chat_format.h"

#include <optional>
#include <vector>

#include "freezeframe/base/error.h"

namespace freezeframe {
namespace {

// The recognised templates in canonical form (see canonical()); kSystemHole marks the default
// system message.
constexpr std::string_view kSystemHole = "{SYSTEM}";
constexpr std::string_view kMessages =
    "{{'<|im_start|>'+message['role']+'\\n'+message['content']+'<|im_end|>\\n'}}";
constexpr std::string_view kPrompt =
    "{%ifadd_generation_prompt%}{{'<|im_start|>assistant\\n'}}{%endif%}";
constexpr std::string_view kDefaultSystem =
    "{%ifloop.firstandmessages[0]['role']!='system'%}{{'<|im_start|>system\\n{SYSTEM}<|im_end|>"
    "\\n'}}{%endif%}";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/// A string literal's text written as the canonical form writes it: single quotes, with
/// newline, tab, quote and backslash escaped.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\'' || c == '\\') {
      out += '\\', out += c;
    } else {
      out += c;
    }
  }
  return out + "'";
}

/// Reads a tag's contents (between "{{"/"{%" and "}}"/"%}", trim markers removed) into a
/// canonical form: no whitespace outside literals, literals quoted(), "a.role" as
/// "a['role']", "~" as "+", and literals joined by "+" merged into one. nullopt when a literal
/// is not closed.
std::optional<std::string> canonical_tag(std::string_view body) {
  struct Part {
    bool literal;
    std::string text;
  };
  std::vector<Part> parts;
  for (std::size_t i = 0; i < body.size();) {
    const char c = body[i];
    if (c == '\'' || c == '"') {
      std::string text;
      std::size_t j = i + 1;
      for (; j < body.size() && body[j] != c; ++j) {
        if (body[j] == '\\' && j + 1 < body.size()) {
          const char e = body[++j];
          text += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          text += body[j];
        }
      }
      if (j >= body.size()) return std::nullopt;
      parts.push_back({true, std::move(text)});
      i = j + 1;
    } else if (is_space(c)) {
      ++i;
    } else {
      if (parts.empty() || parts.back().literal) parts.push_back({false, ""});
      parts.back().text += c == '~' ? '+' : c;
      ++i;
    }
  }
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].literal) {
      std::string code = parts[i].text;
      for (const std::string_view field : {"role", "content"}) {
        const std::string dotted = "message." + std::string(field);
        for (std::size_t at; (at = code.find(dotted)) != std::string::npos;) {
          code.replace(at, dotted.size(), "message['" + std::string(field) + "']");
        }
      }
      out += code;
      continue;
    }
    std::string text = parts[i].text;
    while (i + 2 < parts.size() && !parts[i + 1].literal && parts[i + 1].text == "+" &&
           parts[i + 2].literal) {
      text += parts[i + 2].text;
      i += 2;
    }
    out += quoted(text);
  }
  return out;
}

/// The template as its tags alone, rendered text between them dropped where Jinja (with
/// trim_blocks and lstrip_blocks, as Hugging Face renders) drops it; nullopt when any text
/// outside tags would be output, or a tag is not closed.
std::optional<std::string> canonical(std::string_view t) {
  std::string out, pending;  // pending: literal text since the last tag
  bool strip_next = false;   // a "-" before the last tag's close, or trim_blocks' newline
  bool trim_newline = false;
  for (std::size_t i = 0; i < t.size();) {
    const bool tag =
        t[i] == '{' && i + 1 < t.size() && (t[i + 1] == '{' || t[i + 1] == '%' || t[i + 1] == '#');
    if (!tag) {
      const char c = t[i++];
      if (strip_next && is_space(c)) continue;
      strip_next = false;
      if (trim_newline && c == '\n') {
        trim_newline = false;
        continue;
      }
      trim_newline = false;
      pending += c;
      continue;
    }
    const char kind = t[i + 1];
    const std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    std::size_t start = i + 2;
    const char left_marker = start < t.size() ? t[start] : 0;
    if (left_marker == '-' || left_marker == '+') ++start;
    // The close outside string literals.
    std::size_t end = start;
    char quote = 0;
    for (; end + 1 < t.size(); ++end) {
      if (quote) {
        if (t[end] == '\\') {
          ++end;
        } else if (t[end] == quote) {
          quote = 0;
        }
      } else if (kind != '#' && (t[end] == '\'' || t[end] == '"')) {
        quote = t[end];
      } else if (t.substr(end, 2) == close) {
        break;
      }
    }
    if (end + 1 >= t.size()) return std::nullopt;
    std::size_t body_end = end;
    const char right_marker = body_end > start ? t[body_end - 1] : 0;
    if (right_marker == '-' || right_marker == '+') --body_end;
    // Text before the tag: "-" strips its trailing white space; lstrip_blocks (unless "+")
    // strips a block or comment tag's indentation on its line.
    if (left_marker == '-') {
      while (!pending.empty() && is_space(pending.back())) pending.pop_back();
    } else if (left_marker != '+' && kind != '{') {
      std::size_t k = pending.size();
      while (k > 0 && (pending[k - 1] == ' ' || pending[k - 1] == '\t')) --k;
      if (k == 0 || pending[k - 1] == '\n') pending.resize(k);
    }
    if (!pending.empty()) return std::nullopt;
    if (kind != '#') {
      const auto tag_text = canonical_tag(t.substr(start, body_end - start));
      if (!tag_text) return std::nullopt;
      out += kind == '{' ? "{{" : "{%";
      out += *tag_text;
      out += kind == '{' ? "}}" : "%}";
    }
    strip_next = right_marker == '-';
    // trim_blocks (unless "+"): the newline right after a block or comment tag goes.
    trim_newline = kind != '{' && right_marker != '+';
    i = end + 2;
  }
  if (!pending.empty()) return std::nullopt;
  return out;
}

/// The default system message when `c` is kDefaultSystem (hole filled) at its front.
std::optional<std::string> system_in_hole(std::string_view c) {
  const std::size_t hole = kDefaultSystem.find(kSystemHole);
  const std::string_view before = kDefaultSystem.substr(0, hole);
  const std::string_view after = kDefaultSystem.substr(hole + kSystemHole.size());
  if (c.substr(0, before.size()) != before) return std::nullopt;
  const std::size_t end = c.find(after, before.size());
  if (end == std::string_view::npos) return std::nullopt;
  // Unescape the canonical literal's text (quoted()).
  std::string text;
  for (std::size_t i = before.size(); i < end; ++i) {
    if (c[i] == '\'') return std::nullopt;  // the literal ended inside the hole
    if (c[i] == '\\' && i + 1 < end) {
      const char e = c[++i];
      text += e == 'n' ? '\n' : e == 't' ? '\t' : e;
    } else {
      text += c[i];
    }
  }
  if (c.substr(end + after.size()) != "") return std::nullopt;
  return text;
}

}  // namespace

ChatFormat ChatFormat::recognise(std::string_view template_text, std::string_view where) {
  const auto c = canonical(template_text);
  ChatFormat f;
  const std::string loop_open = "{%formessageinmessages%}";
  const std::string loop_close = std::string(kMessages) + "{%endfor%}" + std::string(kPrompt);
  if (c && *c == loop_open + loop_close) {
    f.name_ = "chatml";
    return f;
  }
  if (c && c->substr(0, loop_open.size()) == loop_open && c->size() > loop_close.size() &&
      c->substr(c->size() - loop_close.size()) == loop_close) {
    // The default system block between the loop's opening and the message.
    const std::string_view middle = std::string_view(*c).substr(
        loop_open.size(), c->size() - loop_open.size() - loop_close.size());
    if (auto system = system_in_hole(middle)) {
      f.name_ = "chatml with a default system message";
      f.default_system_ = std::move(*system);
      f.has_default_system_ = true;
      return f;
    }
  }
  FF_THROW(ErrorCode::kUnsupported, where,
           ": not a chat template this renders (ChatML, with or without a default system "
           "message, is recognised from the template's text; there is no Jinja engine): render "
           "the prompt yourself and encode it");
}

std::string ChatFormat::render(std::span<const ChatMessage> messages,
                               bool add_generation_prompt) const {
  std::string out;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && has_default_system_ && messages[0].role != "system") {
      out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    }
    out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace freezeframe
