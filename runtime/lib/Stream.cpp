//===- Stream.cpp - CUDA streams and events -------------------------------===//
#include "flashrt/Stream.h"

#include "flashrt/Device.h"

#include "CudaApi.h"
#include "Internal.h"

#include <utility>

using namespace flashrt;
using namespace flashrt::cu;

Stream::Stream(Context &context, bool nonBlocking) : owner(&context) {
  context.makeCurrent();
  CUstream created = nullptr;
  context.driver().check(
      context.driver().api().cuStreamCreate(
          &created, nonBlocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT),
      "cuStreamCreate");
  stream = created;
}

Stream Stream::legacyDefault(Context &context) {
  return Stream(&context, nullptr, /*owned=*/false);
}

Stream Stream::borrow(Context &context, CUstream_st *stream) {
  return Stream(&context, stream, /*owned=*/false);
}

Stream::~Stream() { release(); }

Stream::Stream(Stream &&other) noexcept
    : owner(other.owner), stream(std::exchange(other.stream, nullptr)), owned(other.owned) {}

Stream &Stream::operator=(Stream &&other) noexcept {
  if (this != &other) {
    release();
    owner = other.owner;
    stream = std::exchange(other.stream, nullptr);
    owned = other.owned;
  }
  return *this;
}

void Stream::release() noexcept {
  if (!stream || !owned) {
    stream = nullptr;
    return;
  }
  const Driver &driver = owner->driver();
  detail::warnOnFailure(driver, driver.api().cuCtxSetCurrent(owner->handle()),
                        "cuCtxSetCurrent");
  detail::warnOnFailure(driver, driver.api().cuStreamDestroy_v2(stream),
                        "cuStreamDestroy_v2");
  stream = nullptr;
}

void Stream::synchronize() {
  owner->makeCurrent();
  owner->driver().check(owner->driver().api().cuStreamSynchronize(stream),
                        "cuStreamSynchronize");
}

Event::Event(Context &context) : owner(&context) {
  context.makeCurrent();
  CUevent created = nullptr;
  context.driver().check(
      context.driver().api().cuEventCreate(&created, CU_EVENT_DEFAULT),
      "cuEventCreate");
  event = created;
}

Event::~Event() { release(); }

Event::Event(Event &&other) noexcept
    : owner(other.owner), event(std::exchange(other.event, nullptr)) {}

Event &Event::operator=(Event &&other) noexcept {
  if (this != &other) {
    release();
    owner = other.owner;
    event = std::exchange(other.event, nullptr);
  }
  return *this;
}

void Event::release() noexcept {
  if (!event)
    return;
  const Driver &driver = owner->driver();
  detail::warnOnFailure(driver, driver.api().cuCtxSetCurrent(owner->handle()),
                        "cuCtxSetCurrent");
  detail::warnOnFailure(driver, driver.api().cuEventDestroy_v2(event),
                        "cuEventDestroy_v2");
  event = nullptr;
}

void Event::record(Stream &stream) {
  if (!event)
    throw Error(ErrorKind::InvalidArgument, "recording a moved-from Event");
  owner->driver().check(
      owner->driver().api().cuEventRecord(event, stream.handle()),
      "cuEventRecord");
}

void Event::synchronize() {
  if (!event)
    throw Error(ErrorKind::InvalidArgument,
                "synchronizing a moved-from Event");
  owner->driver().check(owner->driver().api().cuEventSynchronize(event),
                        "cuEventSynchronize");
}

float Event::elapsedMs(Event &start, Event &end) {
  if (!start.event || !end.event)
    throw Error(ErrorKind::InvalidArgument, "timing a moved-from Event");
  end.synchronize();
  const Driver &driver = start.owner->driver();
  float milliseconds = 0;
  driver.check(driver.api().cuEventElapsedTime(&milliseconds, start.event,
                                               end.event),
               driver.api().cuEventElapsedTimeSymbol);
  return milliseconds;
}
