// engine/: chat rendering against transformers' apply_chat_template (jinja2) on the fixtures'
// conversations, for SmolLM2's template (ChatML with a default system message) and a
// multi-line ChatML template with trim markers; templates in other forms refused.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "freezeframe/text/chat_format.h"
#include "freezeframe/text/tokenizer.h"
#include "text/tokenizer_fixtures.h"

namespace freezeframe {
namespace {

using testing::lines_of;
using testing::tokenizer_fixtures;
using testing::unescape;

struct ChatCase {
  std::vector<ChatMessage> messages;
  bool generation = false;
  std::string text;
  std::vector<TokenId> ids;
};

/// "case N G", N lines "role\tcontent", the rendered text, its ids.
std::vector<ChatCase> chat_cases(const std::string& name) {
  const std::vector<std::string> lines = lines_of(tokenizer_fixtures() / name);
  std::vector<ChatCase> out;
  for (std::size_t i = 0; i < lines.size();) {
    ChatCase c;
    std::size_t n = 0;
    int generation = 0;
    EXPECT_EQ(std::sscanf(lines[i].c_str(), "case %zu %d", &n, &generation), 2) << lines[i];
    c.generation = generation != 0;
    ++i;
    for (std::size_t m = 0; m < n && i < lines.size(); ++m, ++i) {
      const std::size_t tab = lines[i].find('\t');
      c.messages.push_back({lines[i].substr(0, tab), unescape(lines[i].substr(tab + 1))});
    }
    if (i + 1 >= lines.size()) break;
    c.text = unescape(lines[i++]);
    std::istringstream ids(lines[i++]);
    for (TokenId id; ids >> id;) c.ids.push_back(id);
    out.push_back(std::move(c));
  }
  return out;
}

void expect_rendered(const Tokenizer& tok, const std::string& cases_file) {
  const ChatFormat format = tok.chat_format();
  const std::vector<ChatCase> cases = chat_cases(cases_file);
  ASSERT_GE(cases.size(), 5u);
  for (const ChatCase& c : cases) {
    const std::string text = format.render(c.messages, c.generation);
    EXPECT_EQ(text, c.text);
    EXPECT_EQ(tok.encode(text), c.ids) << c.text;
  }
}

TEST(ChatFormat, SmolLM2TemplateAsTransformersRendersIt) {
  const Tokenizer tok =
      Tokenizer::from_json((tokenizer_fixtures() / "smollm2" / "tokenizer.json").string());
  const ChatFormat format = tok.chat_format();
  EXPECT_EQ(format.name(), "chatml with a default system message");
  EXPECT_EQ(format.default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  expect_rendered(tok, "smollm2_chat.txt");
  EXPECT_EQ(format.render({}, true), "<|im_start|>assistant\n");
}

TEST(ChatFormat, SmolLM2CheckpointTemplate) {
  const auto path = testing::smollm2_gguf();
  if (!path) {
    GTEST_SKIP() << "the SmolLM2-135M-Instruct GGUF is absent (scripts/fetch-smollm2 fetches it "
                    "into .cache/models/, or set FREEZEFRAME_SMOLLM2)";
  }
  expect_rendered(Tokenizer::from_gguf(GgufFile::open(*path)), "smollm2_chat.txt");
}

TEST(ChatFormat, MultiLineChatMLWithTrimMarkers) {
  for (const std::string file : {"tiny/tokenizer.json", "tiny.gguf"}) {
    const Tokenizer tok = Tokenizer::open((tokenizer_fixtures() / file).string());
    EXPECT_EQ(tok.chat_format().name(), "chatml") << file;
    expect_rendered(tok, "tiny_chat.txt");
  }
}

TEST(ChatFormat, OtherTemplatesAreRefused) {
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{{ content }}{% endfor %}";
  const std::vector<std::string> refused = {
      llama3,
      "",
      "<|im_start|>",
      // ChatML with text outside tags, which would be output.
      "{% for message in messages %}\n{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}\n{% endfor %}x",
      // ChatML with a tool call branch.
      "{% for message in messages %}{% if message.tool_calls %}{{ 'tools' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
      "{% endif %}",
  };
  for (const std::string& t : refused) {
    try {
      (void)ChatFormat::recognise(t, "model.gguf: tokenizer.chat_template");
      ADD_FAILURE() << "recognised: " << t;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(e.message().find("model.gguf: tokenizer.chat_template"), std::string::npos);
      EXPECT_NE(e.message().find("ChatML"), std::string::npos);
    }
  }
  // The plain ChatML template, written on one line with double quotes.
  const ChatFormat f = ChatFormat::recognise(
      "{% for message in messages %}{{\"<|im_start|>\" ~ message.role ~ \"\\n\" ~ "
      "message.content ~ \"<|im_end|>\\n\"}}{% endfor %}{% if add_generation_prompt %}{{ "
      "\"<|im_start|>assistant\\n\" }}{% endif %}",
      "x");
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  EXPECT_EQ(f.render(m, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatFormat, NoTemplate) {
  // tiny_digits has no tokenizer_config.json beside it.
  const Tokenizer tok =
      Tokenizer::from_json((tokenizer_fixtures() / "tiny_digits" / "tokenizer.json").string());
  EXPECT_EQ(tok.chat_template(), "");
  EXPECT_EQ(tok.bos_id(), -1);
  try {
    (void)tok.chat_format();
    ADD_FAILURE() << "a chat format without a template";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(e.message().find("tokenizer.chat_template"), std::string::npos);
  }
}

}  // namespace
}  // namespace freezeframe
