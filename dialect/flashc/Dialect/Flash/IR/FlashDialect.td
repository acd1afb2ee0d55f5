//===- FlashDialect.td - The flash dialect -----------------*- tablegen -*-===//
//
// The flash dialect speaks in the tiles of FlashAttention: one program owns
// a query tile of Br rows and streams key/value blocks of Bc rows, carrying
// the running row maximum m, the running row sum l and the unnormalized
// accumulator A. Masks and score modifications are regions over
// (b, h, i, j), so passes can analyse them and the interpreter can run them.
//
//===----------------------------------------------------------------------===//

#ifndef FLASH_DIALECT_TD
#define FLASH_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Flash_Dialect : Dialect {
  let name = "flash";
  let cppNamespace = "::flashc::flash";
  let summary = "Tile-level attention: online softmax, masks and score mods";
  let description = [{
    A `flash.kernel` describes the work of one program instance: one query
    tile of one (batch, head). Its body loads the query tile, loops over key
    blocks with `scf.for` (carrying m, l and A as iteration values), and ends
    with `flash.finalize` and `flash.store`. Tiles are static-shaped builtin
    tensors (`tensor<BrxDxbf16>`, `tensor<BrxBcxf32>`); row vectors are
    `tensor<Brxf32>`. The CPU interpreter executes this IR directly; the GPU
    backends lower it to tensor-core code.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
  ];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Defined next to the attribute storage classes (FlashAttrs.cpp).
    void registerAttributes();
  }];
}

class Flash_Op<string mnemonic, list<Trait> traits = []>
    : Op<Flash_Dialect, mnemonic, traits>;

class Flash_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Flash_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // FLASH_DIALECT_TD
