// engine/: reading safetensors checkpoints against fixtures the safetensors package writes
// (scripts/fixtures/make_safetensors_fixtures.py): one file and a sharded checkpoint with its
// index give the same values; truncated, corrupt and inconsistent files are refused naming
// the file and the tensor.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/safetensors_file.h"
#include "support/fifo.h"
#include "support/scratch_files.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "safetensors";
const std::vector<std::string> kNames = {
    "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
    "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"};

using testing::read_bytes;
using testing::scratch;
using testing::scratch_dir;

std::vector<float> expected_values() {
  const std::vector<char> raw = read_bytes(kFixtures / "expected.f32");
  std::vector<float> v(raw.size() / sizeof(float));
  std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

void expect_values(const SafetensorsCheckpoint& c) {
  const std::vector<float> expected = expected_values();
  std::size_t at = 0;
  for (const std::string& name : kNames) {
    const SafetensorsCheckpoint::Found f = c.get(name);
    std::vector<float> got(static_cast<std::size_t>(f.tensor->elements()), std::nanf(""));
    f.file->read_f32(*f.tensor, got);
    for (std::size_t i = 0; i < got.size(); ++i, ++at) {
      ASSERT_EQ(got[i], expected[at]) << name << " value " << i << ": conversions are exact";
    }
  }
  EXPECT_EQ(at, expected.size());
}

TEST(Safetensors, OneFileAndShardsGiveTheSameValues) {
  const SafetensorsCheckpoint single = SafetensorsCheckpoint::open((kFixtures / "single").string());
  EXPECT_EQ(single.files().size(), 1u);
  EXPECT_EQ(single.num_tensors(), 4u);
  EXPECT_EQ(single.files()[0].metadata().at("format"), "pt");
  const SafetensorsTensor& q = single.get("model.layers.0.self_attn.q_proj.weight").tensor[0];
  EXPECT_EQ(q.dtype, "F16");
  EXPECT_EQ(q.shape, (std::vector<std::int64_t>{8, 8}));
  expect_values(single);

  const SafetensorsCheckpoint sharded =
      SafetensorsCheckpoint::open((kFixtures / "sharded").string());
  EXPECT_EQ(sharded.files().size(), 2u);
  EXPECT_EQ(sharded.num_tensors(), 4u);
  expect_values(sharded);
  EXPECT_EQ(sharded.find("absent").file, nullptr);
  EXPECT_THROW((void)sharded.get("absent"), Error);
}

TEST(Safetensors, TruncatedAndCorruptFilesAreRefusedCleanly) {
  const std::vector<char> bytes = read_bytes(kFixtures / "single" / "model.safetensors");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string path =
        scratch(std::vector<char>(bytes.begin(), bytes.begin() + std::ptrdiff_t(n)), "prefix");
    try {
      (void)SafetensorsFile::open(path);
      ADD_FAILURE() << "a prefix of " << n << " bytes opened";
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::kInvalidArgument) << n << ": " << e.message();
      ASSERT_NE(e.message().find(path), std::string::npos) << e.message();
    }
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    std::vector<char> mutated = bytes;
    for (int k = 0, flips = 1 + int(rng() % 3); k < flips; ++k) {
      mutated[rng() % mutated.size()] = char(rng());
    }
    try {
      const SafetensorsFile f = SafetensorsFile::open(scratch(mutated, "mutated"));
      for (const SafetensorsTensor& t : f.tensors()) {
        std::vector<float> values(static_cast<std::size_t>(t.elements()));
        try {
          f.read_f32(t, values);
        } catch (const Error&) {
        }
      }
    } catch (const Error&) {
    }
  }
  // A tensor whose bytes do not match its shape names the tensor and both counts.
  std::string text(bytes.begin(), bytes.end());
  const std::size_t at = text.find("[8,8]");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 5, "[8,9]");
  try {
    (void)SafetensorsFile::open(scratch({text.begin(), text.end()}, "shape"));
    ADD_FAILURE() << "a shape that does not match its bytes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("tensor 'model.layers.0.self_attn.q_proj.weight'"),
              std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("72 values"), std::string::npos) << e.message();
  }
}

TEST(Safetensors, AnIndexNamingAShardThatLacksTheTensorIsRefused) {
  const fs::path dir = scratch_dir() / "index";
  fs::remove_all(dir);
  fs::copy(kFixtures / "sharded", dir);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors",
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors"}})";
  try {
    (void)SafetensorsCheckpoint::open(dir.string());
    ADD_FAILURE() << "the index was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("'lm_head.weight' in model-00001-of-00002.safetensors"),
              std::string::npos)
        << e.message();
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"lm_head.weight": "../elsewhere.safetensors"}})";
  EXPECT_THROW((void)SafetensorsCheckpoint::open(dir.string()), Error) << "a shard outside";
  fs::remove_all(dir);
}

TEST(Safetensors, ALongShardNameIsShortenedInTheRefusal) {
  const fs::path dir = scratch_dir() / "long_shard";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string shard(5000, 's');
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"lm_head.weight": ")" << shard << R"("}})";
  try {
    (void)SafetensorsCheckpoint::open(dir.string());
    ADD_FAILURE() << "the index was accepted";
  } catch (const Error& e) {
    EXPECT_LT(e.message().size(), 500u) << e.message();
    EXPECT_NE(e.message().find("bytes)"), std::string::npos) << "the full length: " << e.message();
  }
  fs::remove_all(dir);
}

TEST(Safetensors, AFifoShardIsRefusedBeforeItIsOpened) {
  const fs::path dir = scratch_dir() / "fifo_shard";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"lm_head.weight": "shard.safetensors"}})";
  const std::string fifo = (dir / "shard.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string m =
      testing::refusal_of_fifo(fifo, [&] { (void)SafetensorsCheckpoint::open(dir.string()); });
  EXPECT_NE(m.find("safetensors file '" + fifo + "' is a FIFO, not a regular file"),
            std::string::npos)
      << m;
  // The file alone, as well.
  const std::string alone =
      testing::refusal_of_fifo(fifo, [&] { (void)SafetensorsCheckpoint::open(fifo); });
  EXPECT_NE(alone.find("is a FIFO"), std::string::npos) << alone;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace freezeframe
