// tools/: how the command-line tool words an error. A refusal shows its code and message, and
// the source location only with --verbose; a bug says "internal error" (a fuzzer greps for it).

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

#include "error_report.h"
#include "freezeframe/base/error.h"

namespace freezeframe::tools {
namespace {

Error make_error(ErrorCode code, std::string message) {
  return Error(code, std::move(message), "/build/tree/engine/src/spec.cpp", 741);
}

TEST(ErrorReport, RefusalWithoutSourcePathUnlessVerbose) {
  const Error e = make_error(ErrorCode::kNotFound, "cannot read spec file 'x.yaml'");
  EXPECT_EQ(describe_error(e, false), "not found: cannot read spec file 'x.yaml'");
  const std::string verbose = describe_error(e, true);
  EXPECT_NE(verbose.find("cannot read spec file 'x.yaml'"), std::string::npos) << verbose;
  EXPECT_NE(verbose.find("spec.cpp:741"), std::string::npos) << verbose;
}

TEST(ErrorReport, EveryRefusalCodeIsNotAnInternalError) {
  for (const ErrorCode code :
       {ErrorCode::kInvalidArgument, ErrorCode::kUnsupported, ErrorCode::kNotFound,
        ErrorCode::kOutOfMemory, ErrorCode::kCudaError}) {
    const std::string text = describe_error(make_error(code, "no"), false);
    EXPECT_EQ(text.find("internal error"), std::string::npos) << text;
    EXPECT_EQ(text.find(".cpp"), std::string::npos) << text;
  }
}

TEST(ErrorReport, BugsAreInternalErrors) {
  const std::string internal =
      describe_error(make_error(ErrorCode::kInternal, "broken invariant"), false);
  EXPECT_EQ(internal.rfind("internal error: broken invariant", 0), 0u) << internal;
  const std::string verbose = describe_error(make_error(ErrorCode::kInternal, "x"), true);
  EXPECT_EQ(verbose.rfind("internal error: x", 0), 0u) << verbose;
  EXPECT_EQ(describe_error(std::out_of_range("vector::at"), false), "internal error: vector::at");
  EXPECT_EQ(describe_error(std::bad_alloc(), true).rfind("internal error: ", 0), 0u);
}

}  // namespace
}  // namespace freezeframe::tools
