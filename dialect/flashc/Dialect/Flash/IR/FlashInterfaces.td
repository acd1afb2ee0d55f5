//===- FlashInterfaces.td - Interfaces of the flash dialect -*- tablegen -*-===//
#ifndef FLASH_INTERFACES_TD
#define FLASH_INTERFACES_TD

include "mlir/IR/OpBase.td"

// What every kernel-level op (forward `flash.kernel`, `flash.backward_kernel`)
// declares about the variant: its tile, element type, parameters, aux tensors
// and sizes. Ops nested in a kernel check themselves against it without
// knowing which kind of kernel holds them.
def Flash_KernelSignatureInterface : OpInterface<"KernelSignature"> {
  let cppNamespace = "::flashc::flash";
  let description = [{
    The signature of an attention variant as a kernel op carries it.
  }];
  let methods = [
    InterfaceMethod<"The tile shape", "::flashc::flash::TileConfigAttr", "getConfig">,
    InterfaceMethod<"The element type of q, k, v and O in memory", "::mlir::Type",
                    "getElementType">,
    InterfaceMethod<"Runtime scalar parameters", "::mlir::ArrayAttr", "getParams">,
    InterfaceMethod<"Auxiliary tensors", "::mlir::ArrayAttr", "getTensors">,
    InterfaceMethod<"Per DimRole, a fixed size or -1", "::llvm::ArrayRef<int64_t>",
                    "getStaticSizes">,
    InterfaceMethod<"Per DimRole, the smallest role it must equal",
                    "::llvm::ArrayRef<int64_t>", "getDimClasses">,
    InterfaceMethod<"The run-time block summary its mask reads, or null",
                    "::flashc::flash::BlockSummaryAttr", "getBlockSummaryAttr">,
  ];
  let extraSharedClassDeclaration = [{
    /// The declaration of parameter / aux tensor `name`, or null.
    ::flashc::flash::ParamAttr lookupParam(::llvm::StringRef name) {
      for (::mlir::Attribute attr : $_op.getParams())
        if (auto param = ::llvm::cast<::flashc::flash::ParamAttr>(attr);
            param.getName().getValue() == name)
          return param;
      return {};
    }
    ::flashc::flash::AuxTensorAttr lookupTensor(::llvm::StringRef name) {
      for (::mlir::Attribute attr : $_op.getTensors())
        if (auto tensor = ::llvm::cast<::flashc::flash::AuxTensorAttr>(attr);
            tensor.getName().getValue() == name)
          return tensor;
      return {};
    }
  }];
}

#endif // FLASH_INTERFACES_TD
