//===- EmitPTX.h - flash IR to PTX text, in process -------------*- C++ -*-===//
//
// The GPU half of the compiler, as stages a driver can stop after:
//
//   lowerToGPU    flash.kernel -> gpu.module @flashc_kernels holding one
//                 llvm.func (nvvm.kernel) per kernel, written with nvvm,
//                 llvm, arith and scf ops (flash-to-sm80, or flash-to-sm90
//                 on sm_90a)
//   lowerToLLVM   ... -> LLVM + NVVM dialects only (scf-to-cf, arith/cf to
//                 LLVM, reconcile-unrealized-casts)
//   compileToPTX  ... -> PTX text through LLVM's NVPTX backend
//                 (nvvm-attach-target + gpu-module-to-binary{format=isa})
//
// Each stage accepts the output of an earlier one and modifies the module in
// place. No libdevice, CUDA toolkit or GPU is needed.
//
// Kernel ABI (every parameter by value, in this order):
//   0-4    q, k, v, o : element-type global pointers; lse : f32 global pointer
//   5-16   i64 strides in elements: q_batch, q_head, q_row, k_batch, k_head,
//          k_row, v_batch, v_head, v_row, o_batch, o_head, o_row
//          (head-dim stride is 1; BHSD and BSHD are both expressible)
//   17-21  i32 sizes B, H, HKV, N, M
//   then   the kernel's params in declaration order (i32 or f32)
//   then   one global pointer per aux tensor in declaration order (dense
//          row-major, extents from the sizes; reads outside give 0)
//   then   with a #flash.block_summary (a mask that reads aux tensors): the
//          block summary, a global pointer: one u8 class per (b, h, query
//          tile, key block), then, 4-aligned, the tile order (a u32 per
//          summary row and query tile; flash::BlockSummaryShape)
//   then   with a #flash.paged_kv (K and V in a paged cache): the block
//          table (global i32 [B, table_stride]), the key lengths (global
//          i32 [B]), table_stride and the page count (i32 each). k and v
//          are then [pages, page, HKV, D] and their strides are between
//          pages, heads and the rows of a page; key j of sequence b is row
//          j % page of page table[b·table_stride + j / page], and sequence
//          b has min(max(lengths[b], 0), M) keys. A table entry outside
//          [0, pages) reads zeros (the caller's contract)
//   then   with a #flash.varlen, per packed side (queries, then keys): the
//          offsets (global i32 [B + 1]) and the packed tensors' row count
//          (i32). Packed q and o (k and v) are token-major [rows, heads,
//          D] (their batch stride unused): sequence b's rows are
//          offsets[b] .. offsets[b + 1] - 1, both clamped into [0, rows],
//          at most N (M) of them; LSE is then f32 [H, rows]
//   then   with split_keys (flash.kernel's: the launch splits each query
//          tile's key blocks over S CTAs): the partial O (f32 [S, B, H, N,
//          D], dense) and partial LSE (f32 [S, B, H, N]) pointers, then S
//          (i32, >= 1). With S = 1 the kernel stores O and LSE as always
//          and the pointers are unused; with S > 1 it stores its split's
//          partial state and `<name>_combine` (grid kind split_combine:
//          the same parameters up to and including S; grid (ceil(B·H·N /
//          4), 1, 1), 128 threads, no shared memory, launched after it on
//          the same stream) merges them into O and LSE
//   then   with kv_tensor_maps (the wgmma kernel with TMA): the CUtensorMaps
//          of k and v by value (128 bytes, grid constant): bf16/f16, rank 4,
//          dims {D, M, HKV, B}, byte strides {row, head, batch}, box
//          {64, block_cols, 1, 1}, 128-byte swizzle, zero fill; a
//          persistent kernel takes q's before them (dims {D, N, H, B}, box
//          {64, block_rows, 1, 1})
//   then   a persistent kernel's tile counter: a u32[2] global pointer
//          (tiles drawn, CTAs done), zero before the launch; the kernel
//          leaves it zero. Launches that may run at once need their own.
// LSE is dense [B, H, N] f32. K/V head of query head h: h / (H / HKV).
//
// Launch: grid (ceil(N / block_rows), H, B) (split_keys: (ceil(N /
// block_rows) · S, H, B), CTA x running split x mod S of query tile
// x / S; packed_heads: (ceil(G·N / block_rows) (· S), HKV, B) with
// G = H / HKV, the CTA's tile holding packed rows p of its KV group,
// position p / G of query head kv_head·G + p mod G; G·N < 2^31), block
// (threads_per_block, 1, 1)
// (threads_per_block = 32 · block_rows / rows_per_warp; a kernel with a mask
// maps CTA x to query tile grid.x - 1 - x, a kernel with a block summary maps
// its position in the launch through the summary's tile order); persistent
// kernels: grid (min(ceil(N / block_rows) · H · B, CTAs resident at once),
// 1, 1), each CTA drawing tiles from the tile counter until none is left.
// A kernel with a block summary has a second entry, `<name>_summary`
// (grid kind block_summary): the same parameters up to and including the
// summary pointer, then the tile order's counters (a global pointer to
// 12 · E + 4 bytes, E = (B or 1) · (H or 1) · ceil(N / block_rows); zero
// before the launch, the kernel leaves them zero; launches that may run at
// once need their own), grid (CTAs per query tile, each looping over its
// groups of 4 key blocks, at most ceil(ceil(M / block_cols) / 4); ceil(N /
// block_rows); (B or 1) x (H or 1)), 128 threads (a key block per warp),
// 528 bytes of dynamic shared memory, launched first on the same stream.
// dynamic shared memory dynamic_shared_bytes (call cuFuncSetAttribute(
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) when it exceeds 48 KiB).
// Requirements: q, k, v 16-byte aligned and their batch/head/row strides
// multiples of 8 elements (16-byte cp.async); o the same (the wgmma kernel
// stores 16 bytes per thread and row); H a multiple of HKV; B, H, HKV, N,
// M >= 1. Rows >= N of O and LSE are not written.
//
// Backward ABI (the kernels of a flash.backward_kernel share it):
//   0-11   q, k, v, o, dO (element type), lse (f32 [B, H, N], the forward's),
//          delta (f32 [B, H, N] scratch), dq_accum (f32 [B, H, N, D] scratch,
//          dense and 16-byte aligned: the sm_90a kernel adds a query tile's
//          rows with one cp.reduce.async.bulk; with column slices S > 1 laid
//          out [B, H, S, N, D / S]),
//          dq_lock (i32 [B, H, ceil(N / block_rows), S] scratch: the
//          semaphores of the deterministic mode), dq, dk, dv (element type,
//          written)
//   12-35  i64 strides (batch, head, row) of q, k, v, o, dO, dq, dk, dv
//   36-40  i32 sizes B, H, HKV, N, M
//   then   params, one pointer per aux tensor, then one f32 gradient pointer
//          per aux tensor (dense in its shape; null: no gradient wanted),
//          then one i64 scratch pointer per aux tensor (deterministic
//          kernels: 1 + elements fixed-point accumulators, null where no
//          gradient is wanted; other kernels ignore it)
//   then   with a #flash.block_summary (a mask that reads aux tensors, built
//          with --bwd-block-summary): the summary of the backward's Br x Bc
//          tiling (global u8 per (b, h, query tile, key block), the
//          forward's layout without the tile order), scratch
// Launch, in order on one stream: with a block summary, <name>_bwd_summary
// (grid kind block_summary: the forward summary kernel's grid over the
// backward's tiles, 128 threads, no shared memory; it writes the summary
// and reads only the sizes, parameters and aux tensors); <name>_bwd_preprocess
// over (ceil(N / block_rows), H, B) (Δ; zeroes dq_accum, dq_lock and every
// aux gradient, or its fixed-point accumulator, the main kernel adds into);
// <name>_bwd over (ceil(M / block_cols) · S, HKV, B) (S = column_slices: CTA x
// owns key block x / S and the columns of D slice x mod S of dK, dV and dQ;
// dK and dV; adds into dq_accum and the aux gradients; with a summary, each
// query loop walks the tiles it leaves non-empty); <name>_bwd_convert over
// (ceil(N / block_rows), H, B) (dq from dq_accum, in the element type).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_TARGET_NVPTX_EMITPTX_H
#define FLASHC_TARGET_NVPTX_EMITPTX_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashc::nvptx {

struct TargetOptions {
  /// sm_80 / sm_86 / sm_89 / sm_90 run the mma.sync kernel (flash-to-sm80);
  /// sm_90a runs the wgmma kernel (flash-to-sm90) unless `gemm` says
  /// otherwise.
  std::string chip = "sm_90a";
  /// "auto" (wgmma on sm_90a, mma.sync elsewhere), "mma.sync" or "wgmma"
  /// (sm_90a only).
  std::string gemm = "auto";
  /// flash-to-sm90: how K and V reach shared memory, "tma" or "cp.async".
  std::string kvCopy = "tma";
  /// flash-to-sm90 with TMA: P·V of block j runs under block j+1's softmax.
  bool overlapSoftmax = false;
  /// flash-to-sm90 with TMA: a producer warpgroup issues the K/V copies;
  /// "auto" (for tiles of two or more warpgroups), "on" or "off".
  std::string warpSpecialize = "auto";
  /// With warpSpecialize and two or more consumer warpgroups: ping-pong.
  bool pingPong = true;
  /// flash-to-sm90, a one-warpgroup kernel over a paged cache by TMA: the
  /// block a sequence ends in "gather"ed by cp.async or copied by "tma"
  /// with its rows past the sequence zeroed.
  std::string pagedLastBlock = "gather";
  /// Warp-specialized kernels: a persistent grid (one CTA per SM slot, each
  /// looping over query tiles, Q by TMA). The resolver (flashc/Config)
  /// decides it.
  bool persistent = false;
  /// The same for kernels that read aux tensors (`persistent` must be set
  /// too): the resolver keeps them on one CTA per tile above N = 8192.
  bool persistentWithTensors = false;
  /// PTX ISA version; ptxas 12.x and 13.x accept +ptx80.
  std::string features = "+ptx80";
  /// LLVM optimization level of the NVPTX backend.
  int optLevel = 3;
  /// flash-to-sm80 options: numWarps 0 = Br/rowsPerWarp; rowsPerWarp 16 or
  /// 32 query rows per warp, 0 = auto (32 when D + Bc <= 160 and
  /// Br % 128 == 0);
  /// q-in-registers auto/always/never.
  int64_t numWarps = 0;
  int64_t rowsPerWarp = 0;
  std::string qInRegisters = "auto";
  /// Backward kernels: dQ added in key-block order (bitwise reproducible).
  bool deterministic = false;
  /// Backward kernels: a tile's non-uniform aux gradient adds summed in
  /// shared memory first (off until validated on a GPU).
  bool stageAuxGrads = false;
  /// Deterministic wgmma backward: a tile's dQ turn passes on at the next
  /// tile (experimental: slower than the writer).
  bool deferTurns = false;
  /// wgmma backward: a warp beside the body's adds the staged dQ tiles
  /// (flashc's --deterministic turns it on; it buys nothing without).
  bool queryGradWriter = false;
  /// wgmma backward without turns: each key block's walk over the query
  /// tiles starts at its own tile (experimental: not yet run on a GPU).
  bool rotateQueryTiles = false;
  /// wgmma backward: the dKᵀ and dVᵀ products stay in flight until their
  /// accumulators are read (1.02-1.06x at D = 128, H100: on by default).
  bool overlapAccumulates = true;
  /// wgmma backward: which per-tile barriers merge (0 none, 1 dSᵀ's into
  /// the dQ writer's, 2 also the copies' acquire into the tile's first, 3
  /// also three Q/dO stages; -1: config::defaultBackwardBarrierMerge, 3 at
  /// D <= 64, else 2).
  int64_t mergeBarriers = -1;
};

/// What a launcher needs for one kernel (also on the gpu.module as the
/// `flashc.launch` dictionary of #flash.launch, keyed by kernel name).
struct KernelLaunchInfo {
  std::string name;             // the .entry name == the flash.kernel symbol
  int64_t threadsPerBlock = 0;  // blockDim.x (y = z = 1)
  int64_t dynamicSharedBytes = 0;
  int64_t blockRows = 0;        // Br: grid.x = ceil(N / Br), grid.y = H, grid.z = B
  int64_t blockCols = 0;        // Bc
  int64_t headDim = 0;
  int64_t numWarps = 0;         // threadsPerBlock / 32 = Br / rowsPerWarp
  int64_t rowsPerWarp = 0;      // query rows per warp (16 or 32)
  std::string elementType;      // "bf16" or "f16"
  std::vector<std::string> params;     // names, ABI order
  std::vector<std::string> paramTypes; // "i32" or "f32"
  std::vector<std::string> tensors;    // aux tensor names, ABI order
  /// The kernel takes CUtensorMaps of k and v after the aux tensors (TMA).
  bool kvTensorMaps = false;
  /// A persistent grid (min(tiles, CTAs resident at once), 1, 1); the kernel
  /// then takes q's CUtensorMap before k's.
  bool persistent = false;
  /// A per-key-tile kernel's column slices of D: its grid's x is
  /// ceil(M / Bc) times this (the backward above D = 128).
  int64_t columnSlices = 1;
  /// The #flash.launch grid kind: "per_tile", "persistent", "per_key_tile"
  /// (the backward's main kernel), "per_row_tile" (its preprocess and dQ
  /// conversion), "block_summary", "per_split_tile" (a split_keys kernel)
  /// or "split_combine" (its combine kernel).
  std::string grid;
};

struct CompiledPTX {
  std::string ptx;  // one PTX module holding every kernel
  std::string chip;
  std::vector<KernelLaunchInfo> kernels;
};

/// Registers the dialects, the NVVM target attribute interface and the LLVM
/// IR translations this path needs. compileToPTX also appends them to the
/// module's context itself.
void registerNVPTXDialects(mlir::DialectRegistry &registry);

/// Registers flash-to-sm80 and the upstream passes of the stages
/// (convert-scf-to-cf, convert-arith-to-llvm, convert-cf-to-llvm,
/// reconcile-unrealized-casts, nvvm-attach-target, gpu-module-to-binary)
/// for flashc-opt.
void registerNVPTXPasses();

/// The chip a GPU of compute capability major.minor runs: sm_90a on Hopper
/// (wgmma and TMA need the arch-specific target), else sm_<major><minor>.
std::string chipFor(int major, int minor);

mlir::LogicalResult lowerToGPU(mlir::ModuleOp module, const TargetOptions &options);
mlir::LogicalResult lowerToLLVM(mlir::ModuleOp module, const TargetOptions &options);

/// Reads the `flashc.launch` dictionary the GPU lowerings write (valid
/// after lowerToGPU or lowerToLLVM, before compileToPTX consumes the module).
mlir::FailureOr<std::vector<KernelLaunchInfo>> readLaunchInfo(mlir::ModuleOp module);

/// Lowers as far as needed and serializes to PTX. Afterwards the module holds
/// a gpu.binary in place of the gpu.module. Diagnostics go to the context.
mlir::FailureOr<CompiledPTX> compileToPTX(mlir::ModuleOp module, const TargetOptions &options);

} // namespace flashc::nvptx

#endif // FLASHC_TARGET_NVPTX_EMITPTX_H
