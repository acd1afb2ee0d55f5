//===- Device.h - GPU devices and their primary contexts --------*- C++ -*-===//
#ifndef FLASHRT_DEVICE_H
#define FLASHRT_DEVICE_H

#include "flashrt/Driver.h"

#include <string>

struct CUctx_st;

namespace flashrt {

struct ComputeCapability {
  int major = 0;
  int minor = 0;

  /// 90 for sm_90, 80 for sm_80: what PTX .target and ptxas -arch name.
  int number() const { return major * 10 + minor; }
};

/// One GPU, by ordinal. Cheap to copy; queries go to the driver each time.
class Device {
public:
  /// The device $FLASHRT_DEVICE names (a decimal ordinal), default 0.
  /// Throws InvalidArgument for a malformed or out-of-range value.
  static Device fromEnvironment(Driver &driver = Driver::get());
  /// Throws InvalidArgument unless 0 <= ordinal < driver.deviceCount().
  static Device byOrdinal(int ordinal, Driver &driver = Driver::get());

  Driver &driver() const { return *owner; }
  int ordinal() const { return deviceOrdinal; }
  /// The driver's CUdevice handle.
  int handle() const { return device; }

  std::string name() const;
  ComputeCapability computeCapability() const;
  int multiprocessorCount() const;
  /// The most shared memory one block can get after opting in through
  /// Function::setMaxDynamicSharedMemory (227 KiB on Hopper).
  int maxSharedMemoryPerBlockOptin() const;
  /// cuDeviceGetAttribute for an attribute (a CUdevice_attribute value)
  /// not wrapped above.
  int attribute(int cuDeviceAttribute) const;

private:
  Device(Driver &driver, int ordinal, int device)
      : owner(&driver), deviceOrdinal(ordinal), device(device) {}

  Driver *owner;
  int deviceOrdinal;
  int device;
};

/// Holds a reference on a device's primary context (the one the CUDA runtime
/// and other libraries share) and makes it current on the constructing
/// thread. Buffers, modules, streams and events made in a context keep a
/// pointer to it and must not outlive it, which is why Context is pinned.
class Context {
public:
  /// The primary context of Device::fromEnvironment().
  Context();
  explicit Context(const Device &device);
  ~Context();
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;

  const Device &device() const { return owner; }
  Driver &driver() const { return owner.driver(); }
  CUctx_st *handle() const { return context; }

  /// Binds this context to the calling thread (contexts are per thread).
  void makeCurrent() const;
  /// Waits for all work in the context; reports asynchronous kernel faults.
  void synchronize() const;

private:
  Device owner;
  CUctx_st *context = nullptr;
};

} // namespace flashrt

#endif // FLASHRT_DEVICE_H
