// engine/: tokenizer files that are wrong in ways a file can be, each refused with the file and
// the field named and never a crash: GGUF metadata without a tokenizer, of another model, with
// merges of unknown tokens, with ids past the vocabulary, truncated anywhere; tokenizer.json of
// another model type, pre-tokenizer or normalizer, with broken vocabularies or merges; random
// corruptions of either read or refused cleanly.

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "freezeframe/text/tokenizer.h"
#include "support/fifo.h"
#include "support/scratch_files.h"
#include "text/tokenizer_fixtures.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::scratch;
using testing::scratch_dir;
using testing::tokenizer_fixtures;

/// The refusal of opening `path` as a tokenizer: its code and message.
std::pair<ErrorCode, std::string> refusal(const std::string& path) {
  try {
    (void)Tokenizer::open(path);
  } catch (const Error& e) {
    return {e.code(), e.message()};
  }
  return {ErrorCode::kInternal, "accepted"};
}

void expect_refused(const std::string& path, ErrorCode code,
                    const std::vector<std::string>& parts) {
  const auto [got_code, message] = refusal(path);
  EXPECT_EQ(got_code, code) << message;
  EXPECT_NE(message.find(path), std::string::npos) << "names the file: " << message;
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' in: " << message;
  }
}

std::string broken(const std::string& name) {
  return (tokenizer_fixtures() / "broken" / (name + ".gguf")).string();
}

TEST(TokenizerRefusals, GgufMetadata) {
  using E = ErrorCode;
  const std::string no_tokenizer =
      (fs::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "gguf" / "tiny.gguf").string();
  expect_refused(no_tokenizer, E::kInvalidArgument, {"no tokenizer", "tokenizer.ggml.model"});
  expect_refused(broken("model_llama"), E::kUnsupported, {"tokenizer.ggml.model", "'llama'"});
  expect_refused(broken("no_tokens"), E::kInvalidArgument, {"tokenizer.ggml.tokens is absent"});
  expect_refused(broken("tokens_not_strings"), E::kInvalidArgument,
                 {"tokenizer.ggml.tokens is not an array of strings"});
  expect_refused(broken("no_merges"), E::kInvalidArgument, {"tokenizer.ggml.merges is absent"});
  expect_refused(broken("merge_unknown"), E::kInvalidArgument,
                 {"tokenizer.ggml.merges[1]", "'Ġ qqqq'", "'qqqq'", "not in the vocabulary"});
  expect_refused(broken("merge_result_unknown"), E::kInvalidArgument,
                 {"tokenizer.ggml.merges[1]", "'th'", "not in the vocabulary"});
  expect_refused(broken("merge_not_a_pair"), E::kInvalidArgument,
                 {"tokenizer.ggml.merges[1]", "not two tokens"});
  expect_refused(broken("pre_unknown"), E::kUnsupported, {"tokenizer.ggml.pre", "'qwen2'"});
  expect_refused(broken("bos_outside"), E::kInvalidArgument,
                 {"tokenizer.ggml.bos_token_id is 100000", "outside the vocabulary"});
  expect_refused(broken("token_type_short"), E::kInvalidArgument,
                 {"tokenizer.ggml.token_type has 3 entries"});
}

TEST(TokenizerRefusals, TruncatedGgufAnywhere) {
  const std::vector<char> bytes = read_bytes(tokenizer_fixtures() / "tiny.gguf");
  ASSERT_GT(bytes.size(), 1000u);
  // Every length up to the end of the header and metadata's first kilobytes, then a stride.
  for (std::size_t n = 0; n < bytes.size(); n += (n < 1024 ? 1 : 97)) {
    const std::string path =
        scratch(std::vector<char>(bytes.begin(), bytes.begin() + std::ptrdiff_t(n)), "cut.gguf");
    try {
      (void)Tokenizer::open(path);
      // Past the metadata only tensor data could be cut, and this file has none.
      ADD_FAILURE() << "a GGUF cut at " << n << " of " << bytes.size() << " bytes was read";
    } catch (const Error& e) {
      ASSERT_NE(e.code(), ErrorCode::kInternal) << e.message();
      ASSERT_NE(e.message().find(path), std::string::npos) << e.message();
    }
  }
}

/// Random bytes of `file` overwritten, many times: each either reads (and then encodes and
/// decodes a text) or is refused with a freezeframe error that is not a bug.
void expect_corruptions_handled(const fs::path& file, const std::string& name) {
  const std::vector<char> bytes = read_bytes(file);
  std::mt19937 rng(7);
  int read = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<char> mutated = bytes;
    const int flips = 1 + int(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const char values[] = {'\0', '"', '{', ']', ' ', '9', char(0xFF), char(rng())};
      mutated[rng() % mutated.size()] = values[rng() % 8];
    }
    fs::create_directories(scratch_dir() / "corrupt");
    const std::string path = scratch(mutated, "corrupt/" + name);
    try {
      const Tokenizer tok = Tokenizer::open(path);
      (void)tok.decode(tok.encode("Hello, world! 123 <s> <|im_end|>"));
      ++read;
    } catch (const Error& e) {
      ASSERT_NE(e.code(), ErrorCode::kInternal) << e.message();
    }
  }
  EXPECT_GT(read, 0) << "some corruptions leave a readable file";
}

TEST(TokenizerRefusals, RandomCorruptions) {
  expect_corruptions_handled(tokenizer_fixtures() / "tiny.gguf", "tiny.gguf");
  expect_corruptions_handled(tokenizer_fixtures() / "tiny" / "tokenizer.json", "tokenizer.json");
}

/// The tiny tokenizer.json with `from` replaced by `to` (once), written as a scratch file.
std::string edited(const std::string& from, const std::string& to, const std::string& name) {
  const std::vector<char> raw = read_bytes(tokenizer_fixtures() / "tiny" / "tokenizer.json");
  std::string text(raw.begin(), raw.end());
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  fs::create_directories(scratch_dir() / name);
  return scratch(std::vector<char>(text.begin(), text.end()), name + "/tokenizer.json");
}

TEST(TokenizerRefusals, TokenizerJson) {
  using E = ErrorCode;
  expect_refused(edited("\"type\":\"BPE\"", "\"type\":\"Unigram\"", "unigram"), E::kUnsupported,
                 {"model.type", "'Unigram'", "only byte-level BPE"});
  expect_refused(edited("\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}", "nfc"),
                 E::kUnsupported, {"normalizer"});
  expect_refused(edited("\"pre_tokenizer\":{\"type\":\"ByteLevel\"",
                        "\"pre_tokenizer\":{\"type\":\"Whitespace\"", "whitespace_pre"),
                 E::kUnsupported, {"pre_tokenizer.type", "'Whitespace'"});
  expect_refused(edited("\"use_regex\":true", "\"use_regex\":false", "no_regex"), E::kUnsupported,
                 {"pre_tokenizer", "use_regex"});
  expect_refused(edited("\"decoder\":{\"type\":\"ByteLevel\"",
                        "\"decoder\":{\"type\":\"WordPiece\"", "wordpiece_decoder"),
                 E::kUnsupported, {"decoder", "not ByteLevel"});
  expect_refused(edited("\"merges\":[[", "\"merges\":[[\"qqqq\",\"x\"],[", "merge_unknown"),
                 E::kInvalidArgument, {"model.merges[0]", "'qqqq'", "not in the vocabulary"});
  expect_refused(edited("\"merges\":[", "\"merges\":[\"nospace\",", "merge_string"),
                 E::kInvalidArgument, {"model.merges[0]", "is not a merge"});
  expect_refused(
      edited("\"vocab\":{\"<|endoftext|>\":0", "\"vocab\":{\"<|endoftext|>\":-3", "negative_id"),
      E::kInvalidArgument, {"model.vocab['<|endoftext|>'] is -3, not a token id"});
  expect_refused(
      edited("\"vocab\":{\"<|endoftext|>\":0", "\"vocab\":{\"<|endoftext|>\":9000", "hole"),
      E::kInvalidArgument, {"model.vocab", "give ids up to 9000"});
  // Id 5 left out: "!" moved past the end.
  expect_refused(edited(",\"!\":5,", ",\"!\":703,", "gap"), E::kInvalidArgument,
                 {"model.vocab", "has no token of id 5"});
  expect_refused(
      edited("\"vocab\":{\"<|endoftext|>\":0", "\"vocab\":{\"<|endoftext|>\":1", "twice"),
      E::kInvalidArgument, {"model.vocab", "gives id 1 to both"});
  expect_refused(edited("\"single_word\":false", "\"single_word\":true", "single_word"),
                 E::kUnsupported, {"added_tokens[0].single_word"});
  expect_refused(edited("\"byte_fallback\":false", "\"byte_fallback\":true", "byte_fallback"),
                 E::kUnsupported, {"model.byte_fallback"});
  expect_refused(edited("\"model\":{", "\"model\":{\"model\":{", "unclosed"), E::kInvalidArgument,
                 {":1:"});
  // Line and column of the field.
  const auto [code, message] =
      refusal(edited("\"type\":\"BPE\"", "\n\"type\":\"Unigram\"", "line"));
  EXPECT_NE(message.find(":2:"), std::string::npos) << message;
  expect_refused((scratch_dir() / "absent.json").string(), E::kNotFound, {"cannot read"});
  expect_refused(scratch(std::vector<char>{'[', ']'}, "array.json"), E::kInvalidArgument,
                 {"not a JSON object"});
}

TEST(TokenizerRefusals, AFifoIsRefusedBeforeItIsOpened) {
  const std::string fifo = testing::scratch_fifo("fifo.json");
  const std::string m = testing::refusal_of_fifo(fifo, [&] { (void)Tokenizer::open(fifo); });
  EXPECT_NE(m.find("tokenizer file '" + fifo + "' is a FIFO, not a regular file"),
            std::string::npos)
      << m;
  const std::string of_checkpoint =
      testing::refusal_of_fifo(fifo, [&] { (void)Tokenizer::of_checkpoint(fifo); });
  EXPECT_NE(of_checkpoint.find("is a FIFO, not a regular file"), std::string::npos)
      << of_checkpoint;
}

}  // namespace
}  // namespace freezeframe
