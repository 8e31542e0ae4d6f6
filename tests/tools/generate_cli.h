#pragma once
// freezeframe generate run as a user runs it: shared by the command-line tests.

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "support/scratch_files.h"

namespace freezeframe {

namespace fs = std::filesystem;
inline const fs::path kSource = FREEZEFRAME_SOURCE_DIR;

struct ToolRun {
  int rc = -1;
  std::string out, err;
};

/// `text` in single quotes, for a shell command line.
inline std::string quoted(const std::string& text) {
  std::string q;
  q.reserve(text.size() + 2);
  q += '\'';
  q += text;
  q += '\'';
  return q;
}

/// The tool with `args` (quoted by the caller), its stdout, stderr and exit code.
inline ToolRun generate(const std::string& args) {
  ToolRun r;
  const fs::path err = testing::scratch_dir() / "generate.err";
  const std::string command =
      quoted(FREEZEFRAME_TOOL) + " generate " + args + " 2>" + quoted(err.string());
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::vector<char> bytes = testing::read_bytes(err);
  r.err.assign(bytes.begin(), bytes.end());
  return r;
}

#define EXPECT_HAS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "no '" << (part) << "' in:\n" << (text)

/// A Hugging Face checkpoint folder: the tiny Llama's config and weights (vocabulary 16) with
/// the tiny tokenizer (whose first ids are its special tokens).
inline std::string tiny_checkpoint() {
  const fs::path dir = testing::scratch_dir() / "tiny_checkpoint";
  fs::create_directories(dir);
  for (const auto& e :
       fs::directory_iterator(kSource / "tests/fixtures/checkpoints/weights/llama")) {
    fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(kSource / "tests/fixtures/tokenizer/tiny" / name, dir / name,
                  fs::copy_options::overwrite_existing);
  }
  return dir.string();
}

}  // namespace freezeframe
