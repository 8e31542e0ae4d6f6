// engine/: reading GGUF checkpoints against the `gguf` package (fixtures written by
// scripts/fixtures/make_gguf_fixtures.py): metadata of every kind, the values of every type the
// engine reads, every truncation and random corruption refused cleanly, and, where it has
// been fetched (scripts/fetch-smollm2), the real SmolLM2-135M-Instruct checkpoint.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "support/fifo.h"
#include "support/gguf_builder.h"
#include "support/scratch_files.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "gguf";

using testing::read_bytes;
using testing::scratch;
using testing::scratch_dir;

TEST(GgufFile, ReadsMetadataOfEveryKind) {
  const GgufFile f = GgufFile::open((kFixtures / "tiny.gguf").string());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("tiny.u32"), 4000000000);
  EXPECT_EQ(f.get_int("tiny.i32"), -7);
  EXPECT_EQ(f.get_int("tiny.u64"), std::int64_t(1) << 40);
  EXPECT_EQ(f.get_float("tiny.f32"), 0.25);
  EXPECT_EQ(f.get_float("tiny.f64"), -1.5e-300);
  ASSERT_NE(f.find("tiny.bool"), nullptr);
  EXPECT_EQ(f.find("tiny.bool")->kind, GgufValue::Kind::kBool);
  EXPECT_EQ(f.find("tiny.bool")->int_value, 1);
  EXPECT_EQ(f.get_string("tiny.string"), "Ġhello wörld");
  ASSERT_NE(f.find("tiny.strings"), nullptr);
  EXPECT_EQ(f.find("tiny.strings")->strings, (std::vector<std::string>{"<s>", "a b", ""}));
  EXPECT_EQ(f.find("tiny.ints")->ints, (std::vector<std::int64_t>{3, -1, 2}));
  EXPECT_EQ(f.get_int("absent"), std::nullopt);
  EXPECT_THROW((void)f.get_int("tiny.string"), Error) << "a string is not an integer";
}

TEST(GgufFile, DequantisesEveryReadTypeAsTheGgufPackageDoes) {
  const GgufFile f = GgufFile::open((kFixtures / "tiny.gguf").string());
  const std::vector<char> raw = read_bytes(kFixtures / "tiny.f32");
  std::vector<float> expected(raw.size() / sizeof(float));
  std::memcpy(expected.data(), raw.data(), raw.size());
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> want = {
      {"f32", {3, 64}},  {"f16", {2, 64}},  {"bf16", {2, 64}},
      {"q8_0", {2, 64}}, {"q4_0", {3, 64}}, {"q4_1", {2, 96}}};
  ASSERT_EQ(f.tensors().size(), want.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const GgufTensor& t = f.tensor(want[i].first);
    SCOPED_TRACE(t.name + " (" + gguf_type_name(t.type) + ")");
    EXPECT_EQ(t.shape(), want[i].second);
    std::vector<float> got(static_cast<std::size_t>(t.elements()), std::nanf(""));
    f.read_f32(t, got);
    ASSERT_LE(at + got.size(), expected.size());
    for (std::size_t j = 0; j < got.size(); ++j, ++at) {
      // One rounding of d·q (+ m) in f32 on either side.
      ASSERT_NEAR(got[j], expected[at], 1e-6 * std::abs(expected[at]) + 1e-12) << "value " << j;
    }
  }
  EXPECT_EQ(at, expected.size());
  EXPECT_THROW((void)f.tensor("absent"), Error);
}

TEST(GgufFile, OtherTypesAreRefusedByName) {
  std::vector<std::byte> block(144);
  std::vector<float> out(256);
  try {
    dequantize_to_f32(12, block, out);
    ADD_FAILURE() << "Q4_K was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(e.message().find("Q4_K"), std::string::npos) << e.message();
  }
}

// Every prefix of the file is refused with a message naming it, and so is every random
// corruption that breaks it (or it opens): nothing reads past the file or allocates what the
// file cannot hold.
TEST(GgufFile, TruncatedAndCorruptFilesAreRefusedCleanly) {
  const std::vector<char> bytes = read_bytes(kFixtures / "tiny.gguf");
  // The last tensor's end: past it the file holds only padding.
  std::uint64_t end = 0;
  for (const GgufTensor& t : GgufFile::open((kFixtures / "tiny.gguf").string()).tensors()) {
    end = std::max(end, t.offset + t.bytes);
  }
  ASSERT_GT(end, bytes.size() - 64);
  for (std::size_t n = 0; n < end; ++n) {
    const std::string path =
        scratch(std::vector<char>(bytes.begin(), bytes.begin() + std::ptrdiff_t(n)), "prefix");
    try {
      (void)GgufFile::open(path);
      ADD_FAILURE() << "a prefix of " << n << " bytes opened";
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::kInvalidArgument) << n << ": " << e.message();
      ASSERT_NE(e.message().find(path), std::string::npos) << e.message();
    }
  }
  std::mt19937 rng(5);
  int refused = 0;
  for (int i = 0; i < 500; ++i) {
    std::vector<char> mutated = bytes;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) mutated[rng() % mutated.size()] = char(rng());
    const std::string path = scratch(mutated, "mutated");
    try {
      const GgufFile f = GgufFile::open(path);
      for (const GgufTensor& t : f.tensors()) {
        std::vector<float> values(static_cast<std::size_t>(t.elements()));
        try {
          f.read_f32(t, values);
        } catch (const Error&) {
        }
      }
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  const std::string bad_magic = [&] {
    std::vector<char> b = bytes;
    b[0] = 'X';
    return scratch(b, "magic");
  }();
  try {
    (void)GgufFile::open(bad_magic);
    ADD_FAILURE() << "a file without the magic opened";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("not a GGUF file"), std::string::npos) << e.message();
  }
  EXPECT_THROW((void)GgufFile::open("/nonexistent/model.gguf"), Error);
  EXPECT_THROW((void)GgufFile::open("/"), Error) << "a directory";
}

/// The real checkpoint, where it has been fetched.
std::string smollm2_path() {
  if (const char* env = std::getenv("FREEZEFRAME_SMOLLM2")) return env;
  return (fs::path(FREEZEFRAME_SOURCE_DIR) / ".cache" / "models" /
          "SmolLM2-135M-Instruct.Q4_1.gguf")
      .string();
}

TEST(GgufFile, AFifoIsRefusedBeforeItIsOpened) {
  const std::string fifo = testing::scratch_fifo("fifo.gguf");
  const std::string m = testing::refusal_of_fifo(fifo, [&] { (void)GgufFile::open(fifo); });
  EXPECT_NE(m.find("GGUF file '" + fifo + "' is a FIFO, not a regular file"), std::string::npos)
      << m;
}

/// The message GgufFile::open throws for `path` ("opened" when it opens), and how long it took.
std::pair<std::string, double> refusal_and_seconds(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  std::string message = "opened";
  try {
    (void)GgufFile::open(path);
  } catch (const Error& e) {
    message = e.message();
  }
  return {message, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

TEST(GgufFile, TokenizerArraysAreBoundedBeforeTheyAreRead) {
  // One string more than any vocabulary: refused before a string is read.
  testing::GgufBuilder tokens;
  tokens.zeros("tokenizer.ggml.tokens", 8, 8, kMaxGgufVocabulary + 1);
  const std::string path = tokens.write("many_tokens.gguf");
  const auto [m, seconds] = refusal_and_seconds(path);
  EXPECT_NE(m.find(path + ": metadata 'tokenizer.ggml.tokens' holds 1048577 elements, more than "
                          "the 1048576 a vocabulary may have"),
            std::string::npos)
      << m;
  EXPECT_LT(seconds, 2.0);
  // A u8 array as well, and a declared length the file cannot hold.
  testing::GgufBuilder types;
  types.zeros("tokenizer.ggml.token_type", 0, 1, std::uint64_t(16) << 20);
  const auto [types_message, types_seconds] = refusal_and_seconds(types.write("types.gguf"));
  EXPECT_NE(types_message.find("'tokenizer.ggml.token_type' holds 16777216 elements"),
            std::string::npos)
      << types_message;
  EXPECT_LT(types_seconds, 2.0);
  testing::GgufBuilder claimed;
  claimed.zeros("tokenizer.ggml.tokens", 8, 8, (std::uint64_t(1) << 24) + 1, 4);
  const auto [claimed_message, claimed_seconds] =
      refusal_and_seconds(claimed.write("claimed.gguf"));
  EXPECT_NE(claimed_message.find("'tokenizer.ggml.tokens' array length is 16777217, more than"),
            std::string::npos)
      << claimed_message;
  EXPECT_LT(claimed_seconds, 2.0);
}

TEST(GgufFile, LongArraysNoReaderUsesAreSteppedOver) {
  const std::uint64_t bytes = std::uint64_t(32) << 20;
  testing::GgufBuilder g;
  g.zeros("general.blob", 0, 1, bytes)
      .zeros("general.names", 8, 8, kMaxGgufArrayRead + 1)
      .strings("general.tags", {"a", "b"})
      .u32("general.after", 7);
  const std::string path = g.write("blob.gguf");
  const auto start = std::chrono::steady_clock::now();
  const GgufFile f = GgufFile::open(path);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  const GgufValue* blob = f.find("general.blob");
  ASSERT_NE(blob, nullptr);
  EXPECT_EQ(blob->kind, GgufValue::Kind::kArray);
  EXPECT_EQ(blob->array_length, bytes);
  EXPECT_TRUE(blob->ints.empty()) << "its elements are not kept";
  EXPECT_EQ(f.find("general.names")->array_length, kMaxGgufArrayRead + 1);
  EXPECT_TRUE(f.find("general.names")->strings.empty());
  EXPECT_EQ(f.find("general.tags")->strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.get_int("general.after"), 7) << "what follows is read where it is";
  fs::remove(path);
}

TEST(GgufFile, OverlappingTensorsAreRefusedNamingBoth) {
  testing::GgufBuilder g;
  g.f32_tensor("first", {16}, 0).f32_tensor("second", {16}, 32);  // bytes 0..64 and 32..96
  const std::string path = g.write("overlap.gguf");
  const auto [m, seconds] = refusal_and_seconds(path);
  EXPECT_NE(m.find(path + ": tensors 'first' (bytes "), std::string::npos) << m;
  EXPECT_NE(m.find(") and 'second' (bytes "), std::string::npos) << m;
  EXPECT_NE(m.find(") overlap"), std::string::npos) << m;
  EXPECT_LT(seconds, 2.0);
  // Side by side, and with a gap, they are fine.
  testing::GgufBuilder apart;
  apart.f32_tensor("first", {8}, 0).f32_tensor("second", {8}, 64).f32_tensor("third", {8}, 32);
  EXPECT_EQ(GgufFile::open(apart.write("apart.gguf")).tensors().size(), 3u);
}

TEST(GgufFile, ReadsSmolLM2AsTheGgufPackageDoes) {
  const std::string path = smollm2_path();
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (scripts/fetch-smollm2 fetches it)";
  const GgufFile f = GgufFile::open(path);
  std::ifstream in(kFixtures / "smollm2.txt");
  std::string line;
  int tensors_checked = 0;
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string kind;
    row >> kind;
    if (kind == "tensor_count") {
      std::size_t n = 0;
      row >> n;
      EXPECT_EQ(f.tensors().size(), n);
    } else if (kind == "metadata") {
      std::string key, value;
      row >> key >> value;
      if (key == "tokenizer.ggml.tokens.size") {
        ASSERT_NE(f.find("tokenizer.ggml.tokens"), nullptr);
        EXPECT_EQ(std::to_string(f.find("tokenizer.ggml.tokens")->strings.size()), value);
      } else if (key == "general.architecture") {
        EXPECT_EQ(f.get_string(key), value);
      } else {
        EXPECT_EQ(f.get_int(key), std::stoll(value)) << key;
      }
    } else if (kind == "tensor") {
      std::string name, type;
      int n_dims = 0;
      row >> name >> type >> n_dims;
      SCOPED_TRACE(name);
      std::vector<std::int64_t> dims(n_dims);
      for (auto& d : dims) row >> d;
      double sum = 0, sum_sq = 0;
      int k = 0;
      row >> sum >> sum_sq >> k;
      const GgufTensor& t = f.tensor(name);
      EXPECT_EQ(gguf_type_name(t.type), type);
      EXPECT_EQ(t.dims, dims);
      std::vector<float> values(static_cast<std::size_t>(t.elements()));
      f.read_f32(t, values);
      double got_sum = 0, got_sq = 0;
      for (const float v : values) {
        got_sum += v;
        got_sq += double(v) * v;
      }
      EXPECT_NEAR(got_sum, sum, 1e-9 * std::max(1.0, std::abs(sum_sq)));
      EXPECT_NEAR(got_sq, sum_sq, 1e-9 * sum_sq);
      for (int j = 0; j < k; ++j) {
        double want = 0;
        row >> want;
        ASSERT_NEAR(values[j], want, 1e-6 * std::abs(want) + 1e-12) << "value " << j;
      }
      ++tensors_checked;
    }
  }
  EXPECT_EQ(tensors_checked, 5);
}

}  // namespace
}  // namespace freezeframe
