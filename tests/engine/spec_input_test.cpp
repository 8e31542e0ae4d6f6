// engine/: specs that are wrong in ways a person rarely types but a file can hold: huge lists,
// numbers a float cannot keep, a second document, control characters, files that are not
// files; and specs read against a registry other than the global one.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "freezeframe/backends/registry.h"
#include "freezeframe/core/error.h"
#include "freezeframe/engine/spec.h"

namespace freezeframe {
namespace {

/// A small valid spec; tests append lines.
constexpr const char* kTiny = R"(model:
  name: tiny
  num_layers: 4
  hidden_size: 1024
  num_heads: 8
  num_kv_heads: 2
  intermediate_size: 2048
  vocab_size: 32000
  max_position_embeddings: 4096
)";

std::string message_of(const std::string& yaml) {
  try {
    (void)parse_spec(yaml, "inline.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "the spec was accepted:\n" << yaml.substr(0, 2000);
  return {};
}

#define EXPECT_CONTAINS(text, fragment)                                 \
  EXPECT_NE((text).find(fragment), std::string::npos) << "expected: " \
                                                      << (fragment) << "\ngot: " << (text)

TEST(SpecInput, EchoedTextIsEscapedAndShortened) {
  const std::string msg = message_of(kTiny + std::string("  \"na\\ame\\nx\": 1\n"
                                                         "  dtype: \"bf\\x1b[31m16\"\n"));
  EXPECT_CONTAINS(msg, "inline.yaml:10:3: model.na\\x07me\\nx: unknown key 'na\\x07me\\nx'");
  EXPECT_CONTAINS(msg, "model.dtype: expected one of bf16, f16, f32, bfloat16, float16, float32; "
                       "got 'bf\\x1B[31m16'");
  const std::string long_value = message_of(kTiny + std::string("  dtype: ") +
                                            std::string(5000, 'b') + "\n");
  EXPECT_CONTAINS(long_value, "got '" + std::string(80, 'b') + "…' (5000 bytes)");
  EXPECT_LT(long_value.size(), 400u);
  // YAML keeps implicit keys under 1024 characters; an explicit key ("? key") may be longer.
  const std::string long_key =
      message_of(std::string(kTiny) + "  ? " + std::string(100'000, 'k') + "\n  : 1\n");
  EXPECT_CONTAINS(long_key, "model." + std::string(80, 'k') + "…: unknown key '");
  EXPECT_LT(long_key.size(), 600u);
  for (const char c : msg + long_value + long_key) {
    EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\n') << int(c);
  }
  // Thousands of problems: the first hundred are listed, the rest counted.
  std::string keys;
  for (int i = 0; i < 5000; ++i) keys += "  unknown_" + std::to_string(i) + ": 1\n";
  const std::string many = message_of(kTiny + keys);
  EXPECT_CONTAINS(many, "has 5000 problems:");
  EXPECT_CONTAINS(many, "(4900 more not shown)");
}

TEST(SpecInput, OnlyRegularFilesOfBoundedSizeAreRead) {
  for (const char* path : {"/dev/zero", "/dev/null", "/"}) {
    try {
      (void)load_spec(path);
      ADD_FAILURE() << "read " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << path;
      EXPECT_CONTAINS(e.message(), std::string("spec file '") + path + "' is a ");
      EXPECT_CONTAINS(e.message(), "not a regular file");
    }
  }
  const std::filesystem::path big = std::filesystem::temp_directory_path() /
                                    ("ff_big_spec_" + std::to_string(::getpid()) + ".yaml");
  { std::ofstream(big) << kTiny << "# " << std::string(2 << 20, 'x') << "\n"; }
  try {
    (void)load_spec(big.string());
    ADD_FAILURE() << "read a 2 MiB spec";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.message(), "' is " + std::to_string(std::filesystem::file_size(big)) +
                                     " bytes (2.00 MiB), more than the 1.00 MiB a spec file may "
                                     "be");
  }
  std::filesystem::remove(big);
}

}  // namespace
}  // namespace freezeframe
