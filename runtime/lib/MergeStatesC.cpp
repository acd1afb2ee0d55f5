//===- MergeStatesC.cpp - The C entry point of StateMerger ----------------===//

#include "flashrun/merge_states.h"

#include "flashrt/Stream.h"
#include "flashrun/MergeStates.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

thread_local std::string lastError;

/// The device's context and one merger per type pair, made on first use (a
/// failed start is tried again on the next call).
struct Loaded {
  flashrt::Context context;
  std::mutex lock;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<flashrun::StateMerger>> mergers;

  const flashrun::StateMerger &merger(const std::string &stateType, const std::string &outType) {
    std::lock_guard<std::mutex> guard(lock);
    std::unique_ptr<flashrun::StateMerger> &slot = mergers[{stateType, outType}];
    if (!slot)
      slot = std::make_unique<flashrun::StateMerger>(context, stateType, outType);
    return *slot;
  }
};

Loaded &loaded() {
  static std::mutex mutex;
  static std::unique_ptr<Loaded> instance;
  std::lock_guard<std::mutex> guard(mutex);
  if (!instance)
    instance = std::make_unique<Loaded>();
  return *instance;
}

} // namespace

extern "C" int flashrun_merge_states(void *stream, const char *state_type, const char *out_type,
                                     const flashrun_state *states, int num_states,
                                     flashrun_state out, int64_t rows, int64_t head_dim) {
  // What needs no GPU is refused before the device is touched.
  if (!state_type || !out_type) {
    lastError = "the state and output element types must not be null";
    return 2;
  }
  if (num_states < 1 || num_states > flashrun::StateMerger::kMaxStates || !states) {
    lastError = "merge states takes 1 to " + std::to_string(flashrun::StateMerger::kMaxStates) +
                " states, got " + std::to_string(num_states) + (states ? "" : " (null array)");
    return 2;
  }
  try {
    Loaded &state = loaded();
    state.context.makeCurrent();
    flashrt::Stream launchStream =
        flashrt::Stream::borrow(state.context, static_cast<CUstream_st *>(stream));
    std::vector<flashrun::StateRef> refs;
    for (int s = 0; s < num_states; ++s)
      refs.push_back({states[s].out, states[s].lse, states[s].row_stride});
    state.merger(state_type, out_type)
        .merge(launchStream, refs, {out.out, out.lse, out.row_stride}, rows, head_dim);
    lastError.clear();
    return 0;
  } catch (const flashrt::Error &error) {
    lastError = error.what();
    return error.kind() == flashrt::ErrorKind::InvalidArgument ? 2
                                                                : flashrt::exitCodeFor(error.kind());
  } catch (const std::exception &error) {
    lastError = error.what();
    return 5;
  }
}

extern "C" const char *flashrun_merge_states_error(void) { return lastError.c_str(); }
