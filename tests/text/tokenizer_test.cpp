// engine/: the byte-level BPE tokenizer against Hugging Face's tokenizers on the fixture
// strings (scripts/fixtures/make_tokenizer_fixtures.py): the same ids on every string for a
// tokenizer.json with GPT-2's split, one with each digit alone and prefix spaces, a GGUF as
// transformers converts it, SmolLM2's real vocabulary from its tokenizer.json and, where it has
// been fetched, from the checkpoint itself; decode(encode(s)) gives s back; special tokens.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "freezeframe/text/tokenizer.h"
#include "support/scratch_files.h"
#include "text/tokenizer_fixtures.h"

namespace freezeframe {
namespace {

using testing::fixture_ids;
using testing::fixture_strings;
using testing::tokenizer_fixtures;

std::string json_of(const std::string& name) {
  return (tokenizer_fixtures() / name / "tokenizer.json").string();
}

/// Every fixture string encodes to the reference's ids and decodes back to the string (or to
/// what the reference decodes, where bytes without a token were dropped).
void expect_reference(const Tokenizer& tok, const std::string& ids_file) {
  const std::vector<std::string> strings = fixture_strings();
  const auto expected = fixture_ids(ids_file);
  ASSERT_GE(strings.size(), 1000u);
  ASSERT_EQ(strings.size(), expected.size()) << ids_file;
  int wrong = 0;
  for (std::size_t i = 0; i < strings.size() && wrong < 10; ++i) {
    const std::vector<TokenId> got = tok.encode(strings[i]);
    if (got != expected[i].ids) {
      ++wrong;
      ADD_FAILURE() << ids_file << " line " << i + 1 << ": ids differ for '" << strings[i] << "'";
      continue;
    }
    const std::string want = expected[i].decoded.value_or(strings[i]);
    if (tok.decode(got) != want) {
      ++wrong;
      ADD_FAILURE() << ids_file << " line " << i + 1 << ": decode differs for '" << strings[i]
                    << "'";
    }
  }
}

TEST(Tokenizer, MatchesTokenizersWithGpt2Split) {
  const Tokenizer tok = Tokenizer::from_json(json_of("tiny"));
  EXPECT_EQ(tok.pre_tokenizer(), "gpt2");
  expect_reference(tok, "tiny.ids");
}

TEST(Tokenizer, MatchesTokenizersWithDigitsAndPrefixSpaceAndStringMerges) {
  const Tokenizer tok = Tokenizer::from_json(json_of("tiny_digits"));
  EXPECT_EQ(tok.pre_tokenizer(), "smollm");
  expect_reference(tok, "tiny_digits.ids");
}

TEST(Tokenizer, SplitByGpt2ExpressionBeforeByteLevelIsTheSame) {
  // The form transformers' GGUF conversion writes: Split(GPT-2's expression), then ByteLevel
  // without its own split.
  const std::vector<char> raw = testing::read_bytes(json_of("tiny"));
  std::string text(raw.begin(), raw.end());
  const std::string from =
      R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
  const std::string to =
      R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":)"
      R"("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},)"
      R"("behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,)"
      R"("trim_offsets":true,"use_regex":false}]})";
  const std::size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), to);
  std::filesystem::create_directories(testing::scratch_dir() / "split");
  const std::string path =
      testing::scratch(std::vector<char>(text.begin(), text.end()), "split/tokenizer.json");
  expect_reference(Tokenizer::from_json(path), "tiny.ids");
}

TEST(Tokenizer, MatchesTransformersGgufConversion) {
  const Tokenizer tok =
      Tokenizer::from_gguf(GgufFile::open((tokenizer_fixtures() / "tiny.gguf").string()));
  expect_reference(tok, "tiny_gguf.ids");
}

TEST(Tokenizer, MatchesSmolLM2FromItsTokenizerJson) {
  const Tokenizer tok = Tokenizer::from_json(json_of("smollm2"));
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.pre_tokenizer(), "smollm");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), 2);
  expect_reference(tok, "smollm2.ids");
}

TEST(Tokenizer, MatchesSmolLM2FromTheCheckpoint) {
  const auto path = testing::smollm2_gguf();
  if (!path) {
    GTEST_SKIP() << "the SmolLM2-135M-Instruct GGUF is absent (scripts/fetch-smollm2 fetches it "
                    "into .cache/models/, or set FREEZEFRAME_SMOLLM2)";
  }
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(*path));
  EXPECT_EQ(tok.pre_tokenizer(), "smollm");
  expect_reference(tok, "smollm2.ids");
  // The same object as from the tokenizer.json transformers makes of it.
  const Tokenizer json = Tokenizer::from_json(json_of("smollm2"));
  ASSERT_EQ(tok.vocab_size(), json.vocab_size());
  for (TokenId id = 0; id < tok.vocab_size(); ++id) {
    ASSERT_EQ(tok.token_text(id), json.token_text(id)) << id;
    ASSERT_EQ(tok.token_bytes(id), json.token_bytes(id)) << id;
    ASSERT_EQ(tok.is_special(id), json.is_special(id)) << id;
  }
  EXPECT_EQ(tok.bos_id(), json.bos_id());
  EXPECT_EQ(tok.eos_id(), json.eos_id());
  EXPECT_EQ(tok.pad_id(), json.pad_id());
  EXPECT_EQ(tok.chat_template(), json.chat_template());
  EXPECT_EQ(Tokenizer::open(*path).vocab_size(), 49152) << "open() tells GGUF by its magic";
}

TEST(Tokenizer, GgufAndJsonOfOneVocabularyAgree) {
  const Tokenizer gguf = Tokenizer::open((tokenizer_fixtures() / "tiny.gguf").string());
  const Tokenizer json = Tokenizer::open(json_of("tiny"));
  ASSERT_EQ(gguf.vocab_size(), json.vocab_size());
  for (TokenId id = 0; id < gguf.vocab_size(); ++id) {
    EXPECT_EQ(gguf.token_text(id), json.token_text(id)) << id;
  }
  EXPECT_EQ(gguf.bos_id(), json.bos_id());
  EXPECT_EQ(gguf.eos_id(), json.eos_id());
  // add_special: tokenizer.ggml.add_bos/eos_token and the post-processor's "<s> $A </s>".
  for (const std::string& s : fixture_strings()) {
    if (s.find("<mask>") != std::string::npos) continue;  // lstrip exists in tokenizer.json only
    ASSERT_EQ(gguf.encode(s, true), json.encode(s, true)) << s;
  }
  const std::vector<TokenId> wrapped = json.encode("hi", true);
  ASSERT_GE(wrapped.size(), 3u);
  EXPECT_EQ(wrapped.front(), json.bos_id());
  EXPECT_EQ(wrapped.back(), json.eos_id());
  EXPECT_EQ(std::vector<TokenId>(wrapped.begin() + 1, wrapped.end() - 1), json.encode("hi"));
}

// A checkpoint's tokenizer: a GGUF file's own; beside a config.json, its folder's
// tokenizer.json, whichever file of the folder, or the folder itself, names the checkpoint.
TEST(Tokenizer, OfACheckpointIsFoundWhereCheckpointsKeepIt) {
  const std::vector<TokenId> want = Tokenizer::open(json_of("tiny")).encode("Hello world 42");
  const std::filesystem::path folder = tokenizer_fixtures() / "tiny";
  for (const std::filesystem::path& path :
       {tokenizer_fixtures() / "tiny.gguf", folder, folder / "tokenizer_config.json",
        folder / "tokenizer.json"}) {
    EXPECT_EQ(Tokenizer::of_checkpoint(path.string()).encode("Hello world 42"), want) << path;
  }
  try {
    (void)Tokenizer::of_checkpoint((tokenizer_fixtures() / "no_such_model").string());
    ADD_FAILURE() << "a missing checkpoint has a tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("no_such_model"), std::string::npos) << e.message();
  }
}

TEST(Tokenizer, SpecialTokensAreMatchedWholeInText) {
  const Tokenizer tok = Tokenizer::from_json(json_of("smollm2"));
  const TokenId start = *tok.find("<|im_start|>");
  const TokenId end = *tok.find("<|im_end|>");
  EXPECT_EQ(start, 1);
  EXPECT_EQ(end, 2);
  EXPECT_TRUE(tok.is_special(start));
  EXPECT_FALSE(tok.is_special(*tok.find("Ġworld")));
  const std::vector<TokenId> ids = tok.encode("<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(ids.back(), end);
  EXPECT_EQ(tok.decode(ids), "<|im_start|>user\nHi<|im_end|>");
  // Not quite a special token: plain text.
  for (const std::string s : {"<|im_start", "<|IM_START|>", "< |im_start| >"}) {
    for (const TokenId id : tok.encode(s)) EXPECT_FALSE(tok.is_special(id)) << s;
  }
  EXPECT_EQ(tok.token_text(*tok.find("Ġworld")), "Ġworld");
  EXPECT_EQ(tok.token_bytes(*tok.find("Ġworld")), " world");
  EXPECT_EQ(tok.find("no such token"), std::nullopt);
}

TEST(Tokenizer, DecodesPiecesOneByOneToTheWhole) {
  const Tokenizer tok = Tokenizer::from_json(json_of("smollm2"));
  for (const std::string s : {"naïve 😀 中文 مرحبا", "a\u00a0b", "x²³"}) {
    const std::vector<TokenId> ids = tok.encode(s);
    std::string joined;
    for (const TokenId id : ids) joined += tok.decode(std::vector<TokenId>{id});
    EXPECT_EQ(joined, s);
  }
}

TEST(Tokenizer, EmptyAndInvalidUtf8Text) {
  const Tokenizer tok = Tokenizer::from_json(json_of("smollm2"));
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode(std::vector<TokenId>{}), "");
  // Bytes that are not UTF-8 are encoded and decoded byte for byte (where the vocabulary has
  // their byte tokens; SmolLM2 lacks 0xC0, 0xC1 and 0xF5..0xFF, which never occur in UTF-8).
  const std::string bad = "a\x80\xE2\x82 \xF0\x9F\x98";
  EXPECT_EQ(tok.decode(tok.encode(bad)), bad);
}

TEST(Tokenizer, RefusesIdsOutsideTheVocabulary) {
  const Tokenizer tok = Tokenizer::from_json(json_of("tiny"));
  EXPECT_THROW((void)tok.decode(std::vector<TokenId>{tok.vocab_size()}), Error);
  EXPECT_THROW((void)tok.decode(std::vector<TokenId>{-1}), Error);
  EXPECT_THROW((void)tok.token_text(tok.vocab_size()), Error);
}

TEST(Tokenizer, LongInputsAndThreads) {
  const Tokenizer tok = Tokenizer::from_json(json_of("smollm2"));
  // One word of 1 MiB (no cache, no quadratic merging) and many distinct words.
  const std::string word(1 << 20, 'a');
  EXPECT_EQ(tok.decode(tok.encode(word)), word);
  std::string text;
  for (int i = 0; i < 200000; ++i) text += " w" + std::to_string(i * 7919);
  const std::vector<TokenId> reference = tok.encode(text);
  std::vector<std::thread> threads;
  std::vector<std::vector<TokenId>> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { results[t] = tok.encode(text); });
  }
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, reference);
  EXPECT_EQ(tok.decode(reference), text);
}

}  // namespace
}  // namespace freezeframe
