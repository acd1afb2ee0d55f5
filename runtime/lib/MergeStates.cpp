//===- MergeStates.cpp - The merge-states kernel and its launch -----------===//
//
// One warp per row, 4 rows per 128-thread CTA. The warp reads every
// state's LSE of the row (broadcast loads), takes their max m (a NaN
// anywhere poisons the row), weighs state p by w_p = 2^((LSE_p - m)·log2 e),
// then its lanes walk the row's columns 32 apart, each adding w_p·O_p for
// the states with w_p != 0 (so an unwritten O of a part that saw nothing
// never reaches the sum) and storing Σ / Σ w_p; lane 0 stores
// m + ln Σ w_p. The state count is unrolled: the PTX is generated per count
// and element types, as text, and JIT-compiled by the driver on first use.
//
//===----------------------------------------------------------------------===//

#include "flashrun/MergeStates.h"

#include <climits>
#include <sstream>

namespace flashrun {

namespace {

[[noreturn]] void invalid(const std::string &message) {
  throw flashrt::Error(flashrt::ErrorKind::InvalidArgument, message);
}

int64_t bytesOf(const std::string &type) { return type == "f32" ? 4 : 2; }

bool knownType(const std::string &type) {
  return type == "f32" || type == "bf16" || type == "f16";
}

} // namespace

std::string StateMerger::kernelName(int states) {
  return "flashc_merge_states_" + std::to_string(states);
}

std::string StateMerger::ptx(int states, const std::string &stateType,
                             const std::string &outType) {
  if (states < 1 || states > kMaxStates || !knownType(stateType) || !knownType(outType))
    invalid("merge states: no kernel for " + std::to_string(states) + " state(s) of " +
            stateType + " into " + outType);
  int64_t inBytes = bytesOf(stateType), outBytes = bytesOf(outType);
  std::ostringstream os;
  os << ".version 7.0\n.target sm_80\n.address_size 64\n\n"
     << ".visible .entry " << kernelName(states) << "(\n";
  for (int s = 0; s < states; ++s)
    os << "  .param .u64 o" << s << ", .param .u64 l" << s << ", .param .u64 st" << s << ",\n";
  os << "  .param .u64 oo, .param .u64 ol, .param .u64 ost, .param .u32 rows, .param .u32 dim)\n"
     << "{\n"
     << "  .reg .pred %p<8>;\n  .reg .pred %z<" << states << ">;\n"
     << "  .reg .b32 %r<16>;\n  .reg .b64 %rd<16>;\n  .reg .b64 %ob<" << states << ">;\n"
     << "  .reg .f32 %f<16>;\n  .reg .f32 %lse<" << states << ">;\n  .reg .f32 %w<" << states
     << ">;\n  .reg .b16 %h<2>;\n"
     // row = 4·ctaid.x + warp; lane.
     << "  mov.u32 %r1, %ctaid.x;\n  mov.u32 %r2, %tid.x;\n  shr.u32 %r3, %r2, 5;\n"
     << "  and.b32 %r4, %r2, 31;\n  mad.lo.u32 %r5, %r1, 4, %r3;\n"
     << "  ld.param.u32 %r6, [rows];\n  setp.ge.u32 %p1, %r5, %r6;\n  @%p1 bra DONE;\n"
     << "  cvt.u64.u32 %rd1, %r5;\n  shl.b64 %rd2, %rd1, 2;\n"
     // m = max LSE; %p2: some LSE is NaN.
     << "  mov.f32 %f1, 0fFF800000;\n  setp.ne.u32 %p2, %r4, %r4;\n";
  for (int s = 0; s < states; ++s)
    os << "  ld.param.u64 %rd3, [l" << s << "];\n  add.u64 %rd3, %rd3, %rd2;\n"
       << "  ld.global.f32 %lse" << s << ", [%rd3];\n"
       << "  max.f32 %f1, %f1, %lse" << s << ";\n"
       << "  setp.nan.f32 %p3, %lse" << s << ", %lse" << s << ";\n"
       << "  or.pred %p2, %p2, %p3;\n";
  // Weights and their sum; %p4: no state sees the row (m = -inf).
  os << "  setp.eq.f32 %p4, %f1, 0fFF800000;\n  mov.f32 %f2, 0f00000000;\n";
  for (int s = 0; s < states; ++s)
    os << "  sub.f32 %f3, %lse" << s << ", %f1;\n  mul.f32 %f3, %f3, 0f3FB8AA3B;\n"
       << "  ex2.approx.f32 %w" << s << ", %f3;\n  add.f32 %f2, %f2, %w" << s << ";\n"
       << "  setp.eq.f32 %z" << s << ", %w" << s << ", 0f00000000;\n"
       // The row's O in state s: o_s + row·stride_s elements.
       << "  ld.param.u64 %rd4, [o" << s << "];\n  ld.param.u64 %rd5, [st" << s << "];\n"
       << "  mul.lo.u64 %rd5, %rd5, %rd1;\n  shl.b64 %rd5, %rd5, " << (inBytes == 4 ? 2 : 1)
       << ";\n  add.u64 %ob" << s << ", %rd4, %rd5;\n";
  // LSE = m + ln Σ w (NaN if poisoned, -inf if nothing seen); 1 / Σ w.
  os << "  lg2.approx.f32 %f4, %f2;\n  fma.rn.f32 %f4, %f4, 0f3F317218, %f1;\n"
     << "  selp.f32 %f4, 0fFF800000, %f4, %p4;\n  selp.f32 %f4, 0f7FFFFFFF, %f4, %p2;\n"
     << "  rcp.rn.f32 %f5, %f2;\n"
     // The merged row's O.
     << "  ld.param.u64 %rd6, [oo];\n  ld.param.u64 %rd7, [ost];\n"
     << "  mul.lo.u64 %rd7, %rd7, %rd1;\n  shl.b64 %rd7, %rd7, " << (outBytes == 4 ? 2 : 1)
     << ";\n  add.u64 %rd6, %rd6, %rd7;\n"
     << "  ld.param.u32 %r7, [dim];\n  mov.u32 %r8, %r4;\n"
     << "COLUMN:\n  setp.ge.u32 %p5, %r8, %r7;\n  @%p5 bra STORE_LSE;\n"
     << "  cvt.u64.u32 %rd8, %r8;\n  shl.b64 %rd9, %rd8, " << (inBytes == 4 ? 2 : 1) << ";\n"
     << "  mov.f32 %f6, 0f00000000;\n";
  for (int s = 0; s < states; ++s) {
    os << "  @%z" << s << " bra SKIP" << s << ";\n  add.u64 %rd10, %ob" << s << ", %rd9;\n";
    // Plain loads: the output may be one of the states (merged in place).
    if (stateType == "f32")
      os << "  ld.global.f32 %f7, [%rd10];\n";
    else if (stateType == "f16")
      os << "  ld.global.b16 %h0, [%rd10];\n  cvt.f32.f16 %f7, %h0;\n";
    else // bf16: the top half of an f32
      os << "  ld.global.b16 %h0, [%rd10];\n  cvt.u32.u16 %r9, %h0;\n"
         << "  shl.b32 %r9, %r9, 16;\n  mov.b32 %f7, %r9;\n";
    os << "  fma.rn.f32 %f6, %w" << s << ", %f7, %f6;\nSKIP" << s << ":\n";
  }
  os << "  mul.f32 %f6, %f6, %f5;\n"
     << "  selp.f32 %f6, 0f00000000, %f6, %p4;\n  selp.f32 %f6, 0f7FFFFFFF, %f6, %p2;\n"
     << "  shl.b64 %rd11, %rd8, " << (outBytes == 4 ? 2 : 1) << ";\n"
     << "  add.u64 %rd11, %rd6, %rd11;\n";
  if (outType == "f32")
    os << "  st.global.f32 [%rd11], %f6;\n";
  else
    os << "  cvt.rn." << outType << ".f32 %h1, %f6;\n  st.global.b16 [%rd11], %h1;\n";
  os << "  add.u32 %r8, %r8, 32;\n  bra COLUMN;\n"
     << "STORE_LSE:\n  setp.ne.u32 %p6, %r4, 0;\n  @%p6 bra DONE;\n"
     << "  ld.param.u64 %rd12, [ol];\n  add.u64 %rd12, %rd12, %rd2;\n"
     << "  st.global.f32 [%rd12], %f4;\n"
     << "DONE:\n  ret;\n}\n";
  return os.str();
}

StateMerger::StateMerger(flashrt::Context &context, std::string stateType, std::string outType)
    : context(&context), stateType(std::move(stateType)), outType(std::move(outType)) {
  if (!knownType(this->stateType) || !knownType(this->outType))
    invalid("merge states: element types are f32, bf16 or f16, got '" + this->stateType +
            "' and '" + this->outType + "'");
}

void StateMerger::merge(flashrt::Stream &stream, const std::vector<StateRef> &states,
                        const StateRef &out, int64_t rows, int64_t headDim) const {
  if (states.empty() || static_cast<int64_t>(states.size()) > kMaxStates)
    invalid("merge states: 1 to " + std::to_string(kMaxStates) + " states per merge, got " +
            std::to_string(states.size()) + " (merge larger sets in groups)");
  if (rows < 1 || rows > INT32_MAX - 3)
    invalid("merge states: rows must be in [1, 2^31 - 4], got " + std::to_string(rows));
  if (headDim < 1 || headDim > 65536)
    invalid("merge states: head dim must be in [1, 65536], got " + std::to_string(headDim));
  auto check = [&](const StateRef &ref, const std::string &name, const std::string &type) {
    if (!ref.out || !ref.lse)
      invalid("merge states: " + name + " has a null pointer");
    if (ref.out % bytesOf(type) || ref.lse % 4)
      invalid("merge states: " + name + "'s O must be " + std::to_string(bytesOf(type)) +
              "-byte aligned (" + type + ") and its LSE 4-byte aligned");
    if (ref.rowStride < headDim)
      invalid("merge states: " + name + "'s row stride " + std::to_string(ref.rowStride) +
              " is below the head dim " + std::to_string(headDim));
  };
  for (size_t s = 0; s < states.size(); ++s) {
    check(states[s], "state " + std::to_string(s), stateType);
    // Writing over a state other rows still read would race.
    if ((states[s].out == out.out || states[s].lse == out.lse) &&
        (states[s].out != out.out || states[s].lse != out.lse ||
         states[s].rowStride != out.rowStride || stateType != outType))
      invalid("merge states: the output overlaps state " + std::to_string(s) +
              " without being the same state");
  }
  check(out, "the output", outType);

  int count = static_cast<int>(states.size());
  std::shared_ptr<Loaded> loaded;
  {
    std::lock_guard<std::mutex> guard(lock);
    std::shared_ptr<Loaded> &slot = byCount[count];
    if (!slot) {
      flashrt::Module module = flashrt::Module::fromPtx(*context, ptx(count, stateType, outType));
      flashrt::Function function = module.function(kernelName(count));
      slot = std::make_shared<Loaded>(Loaded{std::move(module), std::move(function)});
    }
    loaded = slot;
  }
  flashrt::KernelArgs args;
  for (const StateRef &state : states)
    args.add(state.out).add(state.lse).add(static_cast<uint64_t>(state.rowStride));
  args.add(out.out).add(out.lse).add(static_cast<uint64_t>(out.rowStride))
      .add(static_cast<uint32_t>(rows)).add(static_cast<uint32_t>(headDim));
  loaded->function.launch(flashrt::Dim3(static_cast<unsigned>((rows + 3) / 4)),
                          flashrt::Dim3(128), 0, stream, args);
}

} // namespace flashrun
