// engine/: the broken-spec corpus. Each file under tests/specs/broken/ starts with
// "# expect: <fragment>" lines that the error message must contain, and may say
// "# device-memory: <size>" to be planned for that device (mistakes only a plan can find).
// Every message must also point into the file as name:line:column.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/spec/byte_size.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
const fs::path kBroken = FREEZEFRAME_SOURCE_DIR "/tests/specs/broken";

struct BrokenSpec {
  fs::path path;
  std::vector<std::string> expect;
  std::optional<std::int64_t> device_bytes;
};

BrokenSpec read_case(const fs::path& path) {
  BrokenSpec c{path, {}, {}};
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line) && line.rfind("# ", 0) == 0) {
    if (line.rfind("# expect: ", 0) == 0) c.expect.push_back(line.substr(10));
    if (line.rfind("# device-memory: ", 0) == 0) c.device_bytes = parse_byte_size(line.substr(17));
  }
  return c;
}

std::vector<fs::path> corpus() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kBroken)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(BrokenSpecs, CorpusHasAtLeastThirtyCases) { EXPECT_GE(corpus().size(), 30u); }

TEST(BrokenSpecs, EachIsRefusedWithItsMessageAndLocation) {
  for (const fs::path& path : corpus()) {
    const BrokenSpec c = read_case(path);
    SCOPED_TRACE(path.filename().string());
    ASSERT_FALSE(c.expect.empty()) << "no '# expect:' line";
    std::string message;
    ErrorCode code = ErrorCode::kInternal;
    try {
      const EngineSpec spec = load_spec(path.string());
      ASSERT_TRUE(c.device_bytes.has_value()) << "the spec was accepted";
      (void)plan_memory(spec, *c.device_bytes);
      ADD_FAILURE() << "the spec was accepted and planned";
      continue;
    } catch (const Error& e) {
      message = e.what();
      code = e.code();
    }
    EXPECT_TRUE(code == ErrorCode::kInvalidArgument || code == ErrorCode::kOutOfMemory)
        << to_string(code);
    for (const std::string& fragment : c.expect) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "expected: " << fragment << "\ngot: " << message;
    }
    const std::regex located(
        std::regex_replace(path.filename().string(), std::regex(R"([.])"), R"(\.)") +
        ":[0-9]+:[0-9]+: ");
    EXPECT_TRUE(std::regex_search(message, located)) << "no file:line:column in: " << message;
  }
}

}  // namespace
}  // namespace freezeframe
