//===- Internal.h - Helpers shared by libflashrt's sources -----*- C++ -*-===//
#ifndef FLASHRT_LIB_INTERNAL_H
#define FLASHRT_LIB_INTERNAL_H

#include "flashrt/Driver.h"

namespace flashrt::detail {

/// Destructors cannot throw, yet their driver calls are checked too: a
/// failure there is reported on stderr (usually the aftermath of an earlier
/// fault, such as an illegal address that poisoned the context).
void warnOnFailure(const Driver &driver, int result, const char *function);

} // namespace flashrt::detail

#endif // FLASHRT_LIB_INTERNAL_H
