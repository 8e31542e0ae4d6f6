// FREEZEFRAME_PREFILL_KERNEL picks the prefill kernel: unset or "auto" lets the policy choose,
// "mma_sync" and "sm90" force one, anything else is refused naming the variable and the
// values it takes.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "freezeframe/base/error.h"
#include "prefill/prefill_policy.h"

namespace freezeframe {
namespace {

constexpr const char* kVariable = "FREEZEFRAME_PREFILL_KERNEL";

PrefillKernelChoice choice_with(const char* value) {
  if (value == nullptr) {
    unsetenv(kVariable);
  } else {
    setenv(kVariable, value, 1);
  }
  const PrefillKernelChoice choice = prefill_kernel_choice_from_environment();
  unsetenv(kVariable);
  return choice;
}

TEST(PrefillKernelChoice, ReadsTheEnvironment) {
  EXPECT_EQ(choice_with(nullptr), PrefillKernelChoice::kAuto);
  EXPECT_EQ(choice_with(""), PrefillKernelChoice::kAuto);
  EXPECT_EQ(choice_with("auto"), PrefillKernelChoice::kAuto);
  EXPECT_EQ(choice_with("mma_sync"), PrefillKernelChoice::kMmaSync);
  EXPECT_EQ(choice_with("sm90"), PrefillKernelChoice::kSm90);
}

TEST(PrefillKernelChoice, RefusesOtherValuesNamingThem) {
  setenv(kVariable, "wgmma", 1);
  try {
    (void)prefill_kernel_choice_from_environment();
    ADD_FAILURE() << "an unknown kernel name was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string message = e.message();
    EXPECT_NE(message.find("FREEZEFRAME_PREFILL_KERNEL is 'wgmma'"), std::string::npos) << message;
    EXPECT_NE(message.find("auto, mma_sync or sm90"), std::string::npos) << message;
  }
  unsetenv(kVariable);
}

}  // namespace
}  // namespace freezeframe
