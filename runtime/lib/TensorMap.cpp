//===- TensorMap.cpp - Hopper TMA descriptors ------------------------------===//

#include "flashrt/TensorMap.h"

#include "CudaApi.h"
#include "flashrt/Driver.h"
#include "flashrt/Error.h"

#include <sstream>

namespace flashrt {

static_assert(sizeof(TensorMap) == sizeof(cu::CUtensorMap),
              "TensorMap must be a CUtensorMap");

static std::string describe(const TiledTensorMapSpec &spec) {
  std::ostringstream os;
  auto list = [&](const char *name, const auto &values) {
    os << ' ' << name << " {";
    for (size_t i = 0; i < values.size(); ++i)
      os << (i ? ", " : "") << values[i];
    os << '}';
  };
  os << spec.elementType << " at 0x" << std::hex << spec.address << std::dec;
  list("dims", spec.dims);
  list("byte strides", spec.byteStrides);
  list("box", spec.box);
  return os.str();
}

TensorMap encodeTiledTensorMap(const Driver &driver, const TiledTensorMapSpec &spec) {
  const cu::DriverApi &api = driver.api();
  if (!api.cuTensorMapEncodeTiled)
    throw Error(ErrorKind::DriverError,
                "TMA kernels need cuTensorMapEncodeTiled (a CUDA 12.0+ driver); this driver is " +
                    driver.versionString());
  cu::CUtensorMapDataType type;
  if (spec.elementType == "bf16")
    type = cu::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  else if (spec.elementType == "f16")
    type = cu::CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  else
    throw Error(ErrorKind::InvalidArgument,
                "tensor maps take bf16 or f16 elements, got '" + spec.elementType + "'");
  size_t rank = spec.dims.size();
  if (rank < 1 || rank > 5 || spec.byteStrides.size() != rank - 1 || spec.box.size() != rank)
    throw Error(ErrorKind::InvalidArgument, "malformed tensor map: " + describe(spec));
  std::vector<cu::cuuint32_t> elementStrides(rank, 1);
  TensorMap map;
  int result = api.cuTensorMapEncodeTiled(
      reinterpret_cast<cu::CUtensorMap *>(&map), type, static_cast<cu::cuuint32_t>(rank),
      reinterpret_cast<void *>(spec.address), spec.dims.data(), spec.byteStrides.data(),
      spec.box.data(), elementStrides.data(), cu::CU_TENSOR_MAP_INTERLEAVE_NONE,
      spec.swizzle128 ? cu::CU_TENSOR_MAP_SWIZZLE_128B : cu::CU_TENSOR_MAP_SWIZZLE_NONE,
      cu::CU_TENSOR_MAP_L2_PROMOTION_L2_128B, cu::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  driver.check(result, "cuTensorMapEncodeTiled", ErrorKind::InvalidArgument,
               "for " + describe(spec));
  return map;
}

} // namespace flashrt
