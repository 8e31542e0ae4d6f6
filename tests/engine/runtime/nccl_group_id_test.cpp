// The NCCL group id as ranks share it: 256 hex digits through the environment or a file, read
// back byte for byte; anything else refused saying what is wrong. No GPU.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/runtime/nccl_communicator.h"

namespace freezeframe {
namespace {

NcclGroupId sample_id() {
  NcclGroupId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i)
    id.bytes[i] = static_cast<std::uint8_t>(i * 37 + 5);
  return id;
}

std::string refusal(const std::string& text) {
  try {
    (void)NcclGroupId::from_hex(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "'" << text << "' was taken as an id";
  return "";
}

TEST(NcclGroupId, HexRoundTrips) {
  const NcclGroupId id = sample_id();
  const std::string hex = id.hex();
  ASSERT_EQ(hex.size(), 256u);
  EXPECT_EQ(NcclGroupId::from_hex(hex).bytes, id.bytes);
  EXPECT_EQ(NcclGroupId::from_hex(hex + "\n").bytes, id.bytes) << "a file's line end";
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(NcclGroupId::from_hex(upper).bytes, id.bytes);
}

TEST(NcclGroupId, RefusesWhatIsNotAnId) {
  EXPECT_NE(refusal("").find("256 hex digits; got 0"), std::string::npos);
  EXPECT_NE(refusal(std::string(255, 'a')).find("got 255"), std::string::npos);
  std::string bad(256, '0');
  bad[100] = 'g';
  EXPECT_NE(refusal(bad).find("not a hex digit"), std::string::npos);
}

TEST(NcclGroupId, ThroughTheEnvironmentAndAFile) {
  const NcclGroupId id = sample_id();
  setenv("FREEZEFRAME_NCCL_ID", id.hex().c_str(), 1);
  EXPECT_EQ(NcclGroupId::from_environment().bytes, id.bytes);
  setenv("FREEZEFRAME_NCCL_ID", "xyz", 1);
  try {
    (void)NcclGroupId::from_environment();
    ADD_FAILURE() << "a malformed id was taken";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("FREEZEFRAME_NCCL_ID: "), std::string::npos) << e.message();
  }
  unsetenv("FREEZEFRAME_NCCL_ID");
  EXPECT_THROW((void)NcclGroupId::from_environment(), Error);

  const auto path = std::filesystem::temp_directory_path() / "freezeframe_nccl_group_id_test";
  id.write_file(path.string());
  EXPECT_EQ(NcclGroupId::read_file(path.string()).bytes, id.bytes);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".partial"));
  std::filesystem::remove(path);
  try {
    (void)NcclGroupId::read_file(path.string());
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

}  // namespace
}  // namespace freezeframe
