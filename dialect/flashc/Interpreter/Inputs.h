//===- Inputs.h - Seeded random inputs for a kernel -------------*- C++ -*-===//
#ifndef FLASHC_INTERPRETER_INPUTS_H
#define FLASHC_INTERPRETER_INPUTS_H

#include "flashc/Interpreter/Interpreter.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

namespace flashc::interp {

/// q, k, v drawn from N(0, 1) and rounded to the kernel's element type
/// (never zeros: they hide unwritten outputs), and aux tensors filled by
/// their shape, so masks see plausible data:
///  - i32 whose last extent is a sequence length (`doc: i32[B, N]`):
///    non-decreasing document ids, a packed batch of 1 to 4 documents
///    (`documents` > 0: exactly that many, cut at distinct random points,
///    as the peers' packed-document benchmark does);
///  - other i32 (`kv_len: i32[B]`): lengths in [1, M];
///  - floating point (`slopes: f32[H]`): uniform in [0, 1).
/// A kernel with a paged K/V cache gets one (AttentionInputs::paged): pages
/// shuffled (`PagedInputs::inOrder`: each sequence's pages consecutive, to
/// measure what the shuffle costs), two spare, table entries past a
/// sequence's keys outside the cache; key lengths M, 1, 0, then random in
/// [0, M] (`PagedInputs::fullLengths`: all M), so k and v hold the pages.
/// A varlen kernel gets offsets (AttentionInputs::varlen) of sequences
/// with the same ragged lengths (full, 1, 0, random; `fullLengths`: all
/// full), packed from row 5 (row 0 with full lengths).
/// The same seed gives the same inputs.
struct PagedInputs {
  bool fullLengths = false, inOrder = false;
};
AttentionInputs makeRandomInputs(flash::KernelSignature kernel, const ProblemShape &shape,
                                 uint64_t seed, int64_t documents = 0,
                                 PagedInputs paged = {});

/// `dense`'s K and V moved into a paged cache of `pageSize`-key pages
/// (shuffled by `seed`, two spare pages, the table's unused entries outside
/// the cache), every sequence M keys long: a paged kernel of the same
/// variant then computes what the dense one does on `dense`.
AttentionInputs pageKeysAndValues(const AttentionInputs &dense, int64_t pageSize, uint64_t seed);

/// makeRandomInputs without q, k and v (left empty): for launches too large
/// to draw them on the host, which only time the kernel. The aux tensors
/// come from a stream of their own (not makeRandomInputs' values).
AttentionInputs makeRandomAuxInputs(flash::KernelSignature kernel, const ProblemShape &shape,
                                    uint64_t seed, int64_t documents = 0,
                                    PagedInputs paged = {});

/// The backward pass's dO [B, H, N, D]: N(0, 1) in the element type, from
/// `seed` (a stream separate from makeRandomInputs').
std::vector<float> makeRandomOutputGrad(flash::KernelSignature kernel,
                                        const ProblemShape &shape, uint64_t seed);

/// The sizes of a launch from the sizes a user gave (keys B, H, HKV, N, M,
/// D), then what the kernel fixes or ties, then `base` when given (a smaller
/// shape derived from a run: its H / HKV grouping is kept where it fits) or
/// the defaults B = 1, H = 2, HKV = H, N = 256, M = N. D is the kernel's.
ProblemShape resolveShape(flash::KernelSignature kernel, const llvm::StringMap<int64_t> &given,
                          const ProblemShape *base = nullptr);

/// The keys resolveShape understands, in DimRole order.
extern const llvm::StringRef kShapeKeys[flash::kNumDimRoles];

/// Parses "K=V,K=V" (positive integers, keys from `allowed`) for the command
/// line option `option`; the error names the option and the bad item.
llvm::Expected<llvm::StringMap<int64_t>> parseSizes(llvm::StringRef spec,
                                                    llvm::StringRef option,
                                                    llvm::ArrayRef<llvm::StringRef> allowed);

} // namespace flashc::interp

#endif // FLASHC_INTERPRETER_INPUTS_H
