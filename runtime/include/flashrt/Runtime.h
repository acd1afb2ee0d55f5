//===- Runtime.h - All of libflashrt's public API ---------------*- C++ -*-===//
#ifndef FLASHRT_RUNTIME_H
#define FLASHRT_RUNTIME_H

#include "flashrt/Device.h"
#include "flashrt/Driver.h"
#include "flashrt/Error.h"
#include "flashrt/KernelArgs.h"
#include "flashrt/Memory.h"
#include "flashrt/Module.h"
#include "flashrt/Package.h"
#include "flashrt/Stream.h"
#include "flashrt/TensorMap.h"
#include "flashrt/Timing.h"

#endif // FLASHRT_RUNTIME_H
