// engine/: checkpoints whose weights cannot run the model are refused before anything is read,
// naming the file, the tensor and what the model program expects: a missing tensor, a wrong
// shape, a GGML type that is not read, every problem of a checkpoint at once; truncated files
// when they are opened; and read_rows outside its tensor or buffer.

#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/model/model_program.h"
#include "support/scratch_files.h"
#include "support/weight_fixtures.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::scratch;
using testing::scratch_dir;
using testing::weight_fixtures;
using testing::weights_spec;

/// The refusal of match_weights for the checkpoint `broken` against its own model's program.
std::string refusal(const std::string& broken, const std::string& program_of = "") {
  const CheckpointConfig config = read_checkpoint_config((weight_fixtures() / broken).string());
  const auto source = WeightSource::open(config);
  const ModelProgram program =
      build_model_program(weights_spec(program_of.empty() ? broken : program_of));
  try {
    (void)match_weights(*source, program);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find(config.path), std::string::npos) << "names the file";
    return e.message();
  }
  ADD_FAILURE() << broken << " matched the model";
  return {};
}

TEST(WeightSourceRefusals, AMissingTensorIsNamed) {
  const std::string m = refusal("broken/missing-tensor.gguf");
  EXPECT_NE(m.find("1 problem:"), std::string::npos) << m;
  EXPECT_NE(m.find("no tensor blk.0.ffn_up.weight (model.layers.0.mlp.up_proj.weight); the "
                   "model program needs it as [16, 32]"),
            std::string::npos)
      << m;
}

TEST(WeightSourceRefusals, AWrongShapeIsNamedWithTheExpectedOne) {
  const std::string m = refusal("broken/wrong-shape.gguf");
  EXPECT_NE(m.find("1 problem:"), std::string::npos) << m;
  EXPECT_NE(m.find("wrong-shape.gguf: tensor blk.0.attn_k.weight "
                   "(model.layers.0.self_attn.k_proj.weight) is [64, 32]; the model program "
                   "expects [32, 32]"),
            std::string::npos)
      << m;
}

TEST(WeightSourceRefusals, ATypeThatIsNotReadIsNamed) {
  const std::string m = refusal("broken/q4_k.gguf");
  EXPECT_NE(m.find("1 problem:"), std::string::npos) << m;
  EXPECT_NE(m.find("q4_k.gguf: tensor blk.0.ffn_down.weight "
                   "(model.layers.0.mlp.down_proj.weight): Q4_K is not read; F32, F16, BF16, "
                   "Q8_0, Q4_0 and Q4_1 are"),
            std::string::npos)
      << m;
  // Reading it anyway is refused the same way, not decoded.
  const auto source = WeightSource::open(
      read_checkpoint_config((weight_fixtures() / "broken" / "q4_k.gguf").string()));
  const WeightTensor* down = source->find("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  std::vector<std::byte> row(static_cast<std::size_t>(down->row_elements() * 2));
  try {
    source->read_rows(*down, 0, 1, DType::kBF16, row);
    ADD_FAILURE() << "a Q4_K row was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(e.message().find("Q4_K is not read"), std::string::npos) << e.message();
  }
}

TEST(WeightSourceRefusals, EveryProblemIsListedAtOnce) {
  // The Q4_K model's MLP is 256 wide where the llama program's is 16, and its LM head tied:
  // three shapes, the type, the missing head.
  const std::string m = refusal("broken/q4_k.gguf", "llama.gguf");
  EXPECT_NE(m.find("5 problems:"), std::string::npos) << m;
  EXPECT_NE(m.find("blk.0.ffn_gate.weight (model.layers.0.mlp.gate_proj.weight) is [256, 32]; "
                   "the model program expects [16, 32]"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("no tensor output.weight (lm_head.weight)"), std::string::npos) << m;
  EXPECT_NE(m.find("Q4_K is not read"), std::string::npos) << m;
}

TEST(WeightSourceRefusals, TruncatedFilesAreRefusedNamingThem) {
  // GGUF: the config read from the whole file, the weights from a prefix of it.
  CheckpointConfig config = read_checkpoint_config((weight_fixtures() / "llama.gguf").string());
  const std::vector<char> bytes = read_bytes(weight_fixtures() / "llama.gguf");
  for (std::size_t n = 0; n < bytes.size(); n += 61) {
    config.path = config.config_file =
        scratch(std::vector<char>(bytes.begin(), bytes.begin() + std::ptrdiff_t(n)), "cut.gguf");
    try {
      (void)WeightSource::open(config);
      ADD_FAILURE() << "a prefix of " << n << " bytes opened";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(e.message().find(config.path), std::string::npos) << e.message();
    }
  }
  // Safetensors: a checkpoint folder whose second shard is cut short.
  const fs::path folder = scratch_dir() / "cut-llama";
  fs::create_directories(folder);
  for (const auto& entry : fs::directory_iterator(weight_fixtures() / "llama")) {
    fs::copy_file(entry.path(), folder / entry.path().filename(),
                  fs::copy_options::overwrite_existing);
  }
  const fs::path shard = folder / "model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  CheckpointConfig hf = read_checkpoint_config(folder.string());
  try {
    (void)WeightSource::open(hf);
    ADD_FAILURE() << "a cut shard opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(e.message().find(shard.string()), std::string::npos) << e.message();
  }
  // No weights beside the config at all.
  fs::remove(shard);
  fs::remove(folder / "model-00001-of-00002.safetensors");
  fs::remove(folder / "model.safetensors.index.json");
  EXPECT_THROW((void)WeightSource::open(hf), Error);
}

TEST(WeightSourceRefusals, ReadRowsStaysInsideItsTensorAndBuffer) {
  const auto source =
      WeightSource::open(read_checkpoint_config((weight_fixtures() / "llama.gguf").string()));
  const auto other =
      WeightSource::open(read_checkpoint_config((weight_fixtures() / "llama").string()));
  const WeightTensor& k = *source->find("model.layers.0.self_attn.k_proj.weight");
  std::vector<std::byte> two_rows(static_cast<std::size_t>(2 * k.row_elements() * 2));
  auto code_of = [&](auto&& read) {
    try {
      read();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;  // not refused
  };
  EXPECT_EQ(code_of([&] { source->read_rows(k, k.rows() - 1, 2, DType::kBF16, two_rows); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { source->read_rows(k, -1, 2, DType::kBF16, two_rows); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { source->read_rows(k, 0, 1, DType::kBF16, two_rows); }),
            ErrorCode::kInvalidArgument)
      << "a buffer of another size";
  EXPECT_EQ(code_of([&] { source->read_rows(k, 0, 1, DType::kI32, two_rows); }),
            ErrorCode::kInvalidArgument);
  const WeightTensor& foreign = *other->find("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(code_of([&] { source->read_rows(foreign, 0, 2, DType::kBF16, two_rows); }),
            ErrorCode::kInvalidArgument)
      << "a tensor of another source";
  source->read_rows(k, k.rows() - 2, 2, DType::kBF16, two_rows);
}

}  // namespace
}  // namespace freezeframe
