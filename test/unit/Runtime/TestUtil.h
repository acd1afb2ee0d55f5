//===- TestUtil.h - Helpers for libflashrt's unit tests ---------*- C++ -*-===//
#ifndef FLASHRT_TEST_TESTUTIL_H
#define FLASHRT_TEST_TESTUTIL_H

#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

namespace flashrt::test {

/// Sets an environment variable for one scope and restores the old value,
/// so a test that fakes a missing driver leaves the real one visible to the
/// tests after it.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      previous = old;
    setenv(name, value, /*overwrite=*/1);
  }
  ~ScopedEnv() {
    if (previous)
      setenv(name, previous->c_str(), 1);
    else
      unsetenv(name);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  const char *name;
  std::optional<std::string> previous;
};

/// The text of a kernel under test/unit/Runtime/kernels, as embedded at
/// configure time.
inline std::string readKernel(const std::string &fileName) {
  static const std::map<std::string, std::string> kernels = {
#include "TestKernels.inc"
  };
  auto found = kernels.find(fileName);
  if (found == kernels.end())
    throw std::runtime_error("no embedded test kernel " + fileName);
  return found->second;
}

} // namespace flashrt::test

#endif // FLASHRT_TEST_TESTUTIL_H
