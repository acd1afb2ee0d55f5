//===- Timing.h - Timing kernel launches with CUDA events -------*- C++ -*-===//
#ifndef FLASHRT_TIMING_H
#define FLASHRT_TIMING_H

#include "flashrt/Error.h"

#include <functional>
#include <vector>

namespace flashrt {

class Stream;

/// Calls `launch` `warmup` times, then `reps` times between a pair of events
/// recorded on `stream`, and returns each rep's milliseconds. `launch` must
/// submit its work to `stream`. Throws InvalidArgument unless warmup >= 0
/// and reps >= 1.
std::vector<float> timeLaunches(Stream &stream, int warmup, int reps,
                                const std::function<void()> &launch);

/// The median (the mean of the middle two for an even count); robust to the
/// occasional slow rep. Throws InvalidArgument for an empty vector.
float median(std::vector<float> values);

} // namespace flashrt

#endif // FLASHRT_TIMING_H
