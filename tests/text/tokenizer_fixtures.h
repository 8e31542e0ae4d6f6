#pragma once
// The tokenizer fixtures written by scripts/fixtures/make_tokenizer_fixtures.py: the test
// strings (one a line, escaped) and, per tokenizer, the reference's ids for each string (and its
// decode where that is not the string).

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "freezeframe/text/tokenizer.h"

namespace freezeframe::testing {

inline const std::filesystem::path& tokenizer_fixtures() {
  static const std::filesystem::path p =
      std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "tokenizer";
  return p;
}

/// The real SmolLM2 checkpoint, where scripts/fetch-smollm2 put it (or $FREEZEFRAME_SMOLLM2).
inline std::optional<std::string> smollm2_gguf() {
  if (const char* env = std::getenv("FREEZEFRAME_SMOLLM2")) return std::string(env);
  const auto p = std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / ".cache" / "models" /
                 "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(p)) return p.string();
  return std::nullopt;
}

/// Undoes the script's escape(): \\ \n \r \t \xNN.
inline std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char e = s[++i];
    if (e == 'n') {
      out += '\n';
    } else if (e == 'r') {
      out += '\r';
    } else if (e == 't') {
      out += '\t';
    } else if (e == 'x' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += e;
    }
  }
  return out;
}

inline std::vector<std::string> lines_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> fixture_strings() {
  std::vector<std::string> out;
  for (const std::string& line : lines_of(tokenizer_fixtures() / "strings.txt")) {
    out.push_back(unescape(line));
  }
  return out;
}

struct ExpectedTokens {
  std::vector<TokenId> ids;
  std::optional<std::string> decoded;  ///< the reference's decode, where it is not the string
};

inline std::vector<ExpectedTokens> fixture_ids(const std::string& name) {
  std::vector<ExpectedTokens> out;
  for (const std::string& line : lines_of(tokenizer_fixtures() / name)) {
    ExpectedTokens e;
    const std::size_t tab = line.find('\t');
    std::istringstream ids(line.substr(0, tab));
    for (TokenId id; ids >> id;) e.ids.push_back(id);
    if (tab != std::string::npos) e.decoded = unescape(line.substr(tab + 1));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace freezeframe::testing
