//===- ErrorTest.cpp - Error kinds and exit codes -------------------------===//
#include "flashrt/Error.h"

#include <gtest/gtest.h>

#include <set>

using namespace flashrt;

namespace {

TEST(ErrorTest, ExitCodesSeparateNoGpuJitAndOtherFailures) {
  EXPECT_EQ(exitCodeFor(ErrorKind::NoDriver), 3);
  EXPECT_EQ(exitCodeFor(ErrorKind::NoDevice), 3);
  EXPECT_EQ(kNoGpuExitCode, 3);
  EXPECT_EQ(exitCodeFor(ErrorKind::JitError), 4);
  EXPECT_EQ(exitCodeFor(ErrorKind::LaunchError), 5);
  EXPECT_EQ(exitCodeFor(ErrorKind::DriverError), 5);
  EXPECT_EQ(exitCodeFor(ErrorKind::InvalidArgument), 5);

  // The three classes must be told apart by scripts, and none may look like
  // success, a generic failure (1) or a usage error (2).
  std::set<int> codes = {exitCodeFor(ErrorKind::NoDriver),
                         exitCodeFor(ErrorKind::JitError),
                         exitCodeFor(ErrorKind::DriverError)};
  EXPECT_EQ(codes.size(), 3u);
  for (int code : codes)
    EXPECT_GT(code, 2);
}

TEST(ErrorTest, CarriesKindMessageAndDriverResult) {
  Error error(ErrorKind::JitError, "cuModuleLoadDataEx failed: boom", 218);
  EXPECT_EQ(error.kind(), ErrorKind::JitError);
  EXPECT_STREQ(error.what(), "cuModuleLoadDataEx failed: boom");
  EXPECT_EQ(error.driverResult(), 218);
  EXPECT_STREQ(errorKindName(ErrorKind::NoDevice), "NoDevice");
  EXPECT_STREQ(errorKindName(ErrorKind::InvalidArgument), "InvalidArgument");
}

} // namespace
