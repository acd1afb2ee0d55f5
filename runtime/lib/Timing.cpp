//===- Timing.cpp - Timing kernel launches with CUDA events ---------------===//
#include "flashrt/Timing.h"

#include "flashrt/Error.h"
#include "flashrt/Stream.h"

#include <algorithm>
#include <string>

using namespace flashrt;

std::vector<float> flashrt::timeLaunches(Stream &stream, int warmup, int reps,
                                         const std::function<void()> &launch) {
  if (warmup < 0 || reps < 1)
    throw Error(ErrorKind::InvalidArgument,
                "timeLaunches needs warmup >= 0 and reps >= 1, got warmup " +
                    std::to_string(warmup) + " and reps " +
                    std::to_string(reps));
  // Events first, so creating them never lands inside a timed interval.
  std::vector<Event> starts, ends;
  starts.reserve(reps);
  ends.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    starts.emplace_back(stream.context());
    ends.emplace_back(stream.context());
  }
  for (int i = 0; i < warmup; ++i)
    launch();
  stream.synchronize();

  // One event pair per rep, all queued before waiting, so the GPU runs the
  // reps back to back as it would in an application.
  for (int i = 0; i < reps; ++i) {
    starts[i].record(stream);
    launch();
    ends[i].record(stream);
  }
  std::vector<float> milliseconds;
  milliseconds.reserve(reps);
  for (int i = 0; i < reps; ++i)
    milliseconds.push_back(Event::elapsedMs(starts[i], ends[i]));
  return milliseconds;
}

float flashrt::median(std::vector<float> values) {
  if (values.empty())
    throw Error(ErrorKind::InvalidArgument, "median of no values");
  size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  float upper = values[middle];
  if (values.size() % 2 == 1)
    return upper;
  float lower = *std::max_element(values.begin(), values.begin() + middle);
  return lower + (upper - lower) / 2;
}
