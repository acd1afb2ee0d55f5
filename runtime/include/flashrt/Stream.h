//===- Stream.h - CUDA streams and events -----------------------*- C++ -*-===//
#ifndef FLASHRT_STREAM_H
#define FLASHRT_STREAM_H

#include "flashrt/Error.h"

struct CUstream_st;
struct CUevent_st;

namespace flashrt {

class Context;

/// A CUDA stream. Owned streams are destroyed with the object; the legacy
/// default stream is only referred to.
class Stream {
public:
  /// Creates a stream. A blocking stream (the default) is ordered with the
  /// legacy default stream, which DeviceBuffer's copies and fill use; a
  /// non-blocking one is not.
  explicit Stream(Context &context, bool nonBlocking = false);
  /// The legacy default (NULL) stream of `context`.
  static Stream legacyDefault(Context &context);
  /// A stream created elsewhere (a CUstream of `context`, or null for the
  /// legacy default stream); never destroyed by this object.
  static Stream borrow(Context &context, CUstream_st *stream);
  ~Stream();
  Stream(Stream &&other) noexcept;
  Stream &operator=(Stream &&other) noexcept;
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;

  Context &context() const { return *owner; }
  /// The CUstream; null for the legacy default stream.
  CUstream_st *handle() const { return stream; }
  bool isLegacyDefault() const { return stream == nullptr; }

  /// Waits for the stream's work; reports asynchronous kernel faults.
  void synchronize();

private:
  Stream(Context *context, CUstream_st *stream, bool owned)
      : owner(context), stream(stream), owned(owned) {}
  void release() noexcept;

  Context *owner;
  CUstream_st *stream = nullptr;
  bool owned = true;
};

/// A CUDA event with timing enabled.
class Event {
public:
  explicit Event(Context &context);
  ~Event();
  Event(Event &&other) noexcept;
  Event &operator=(Event &&other) noexcept;
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;

  CUevent_st *handle() const { return event; }

  /// Captures the work submitted to `stream` so far.
  void record(Stream &stream);
  /// Waits until the captured work has completed.
  void synchronize();
  /// Milliseconds between two recorded events; waits for `end` first, so the
  /// result never depends on the caller having synchronized.
  static float elapsedMs(Event &start, Event &end);

private:
  void release() noexcept;

  Context *owner;
  CUevent_st *event = nullptr;
};

} // namespace flashrt

#endif // FLASHRT_STREAM_H
