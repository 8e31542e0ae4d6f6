#pragma once
// What the checkpoint config tests share: the fixtures' folder, scratch config.json and
// metadata-only GGUF files, and the refusal of a config.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "support/scratch_files.h"

namespace freezeframe::config_testing {

namespace fs = std::filesystem;
inline const fs::path kFixtures =
    fs::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "checkpoints";

using testing::scratch;
using testing::scratch_dir;

inline std::string write_text(const std::string& name, const std::string& text) {
  return scratch(std::vector<char>(text.begin(), text.end()), name);
}

/// The message read_checkpoint_config throws for `path` (empty when it reads).
inline std::string refusal(const std::string& path,
                           ErrorCode expected = ErrorCode::kInvalidArgument) {
  try {
    (void)read_checkpoint_config(path);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.message();
    return e.message();
  }
  ADD_FAILURE() << path << " was read";
  return "";
}

/// A config.json that Llama reads, with `replace` swapped in for the line holding its key.
inline std::string llama_config(const std::string& key = "", const std::string& line = "") {
  std::ifstream in(kFixtures / "llama-3.1-8b" / "config.json");
  std::string text, row;
  while (std::getline(in, row)) {
    if (!key.empty() && row.find("\"" + key + "\":") != std::string::npos) {
      if (!line.empty()) text += "  " + line + "\n";
      continue;
    }
    text += row + "\n";
  }
  return text;
}

/// A GGUF v3 file holding only metadata: u32 values, f32 values and strings.
class MetadataOnlyGguf {
 public:
  MetadataOnlyGguf& u32(const std::string& key, std::uint32_t v) { return add(key, 4, &v, 4); }
  MetadataOnlyGguf& f32(const std::string& key, float v) { return add(key, 6, &v, 4); }
  MetadataOnlyGguf& str(const std::string& key, const std::string& v) {
    std::vector<char> value(8);
    const std::uint64_t n = v.size();
    std::memcpy(value.data(), &n, 8);
    value.insert(value.end(), v.begin(), v.end());
    return add(key, 8, value.data(), value.size());
  }
  std::string write(const std::string& name) const {
    std::vector<char> out = {'G', 'G', 'U', 'F'};
    append(out, std::uint32_t{3});
    append(out, std::uint64_t{0});
    append(out, count_);
    out.insert(out.end(), kvs_.begin(), kvs_.end());
    while (out.size() % 32 != 0) out.push_back(0);
    return scratch(out, name);
  }

 private:
  template <typename T>
  static void append(std::vector<char>& out, T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  MetadataOnlyGguf& add(const std::string& key, std::uint32_t type, const void* value,
                        std::size_t bytes) {
    append(kvs_, std::uint64_t{key.size()});
    kvs_.insert(kvs_.end(), key.begin(), key.end());
    append(kvs_, type);
    const char* p = static_cast<const char*>(value);
    kvs_.insert(kvs_.end(), p, p + bytes);
    ++count_;
    return *this;
  }
  std::vector<char> kvs_;
  std::uint64_t count_ = 0;
};

/// The metadata of a small llama model, every required key present.
inline MetadataOnlyGguf small_llama_gguf() {
  MetadataOnlyGguf g;
  g.str("general.architecture", "llama")
      .u32("llama.block_count", 4)
      .u32("llama.context_length", 2048)
      .u32("llama.embedding_length", 256)
      .u32("llama.feed_forward_length", 512)
      .u32("llama.attention.head_count", 8)
      .f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .u32("llama.vocab_size", 1000);
  return g;
}

}  // namespace freezeframe::config_testing
