#pragma once
// Where tests find the real SmolLM2-135M-Instruct GGUF (scripts/fetch-smollm2 puts it under
// .cache/models/; FREEZEFRAME_SMOLLM2 names another copy). Tests that need it skip without it.

#include <cstdlib>
#include <filesystem>
#include <string>

namespace freezeframe::testing {

inline std::string smollm2_path(const std::filesystem::path& source_dir) {
  if (const char* env = std::getenv("FREEZEFRAME_SMOLLM2")) return env;
  return (source_dir / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
}

}  // namespace freezeframe::testing
