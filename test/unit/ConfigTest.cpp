//===- ConfigTest.cpp - The kernel-configuration resolver and its rules ---===//
//
// resolveKernelConfig against the rules it owns: the default tile per
// variant, GEMM kind and head dim; what a request overrides and what it
// leaves to the rules; the persistent grid by N; errors; and what IRGen
// does without a tile (it chooses none itself).
//
//===----------------------------------------------------------------------===//

#include "flashc/Config/ConfigFlags.h"
#include "flashc/Config/KernelConfig.h"
#include "flashc/Dialect/Flash/Transforms/MaskIntervals.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Tuning/Tuning.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <map>

using namespace flashc;

namespace {

constexpr const char *kVariants = R"(
attention causal { mask = j <= i }
attention full { }
attention document {
  tensor doc: i32[B, N]
  mask = doc[b, i] == doc[b, j] && j <= i
}
attention prefix_lm {
  param prefix: i32 = 128
  mask = j < prefix || j <= i
}
attention sink_window {
  mask = j < 4 || (j <= i && i - j < 256)
}
attention softcap { score = 30.0 * tanh(s / 30.0) }
attention alibi {
  tensor slopes: f32[H]
  score = s - slopes[h] * (i - j)
  mask = j <= i
}
attention key_padding {
  tensor kv_len: i32[B]
  mask = j < kv_len[b]
}
attention relative_bias {
  tensor bias: f32[H, 128]
  score = s + bias[h, min(i - j, 127)]
}
attention reversed { score = 2.0 - s }
attention biased_twice { score = 1.0 + (s - 0.5 * i) }
)";

struct Parsed {
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  std::optional<frontend::Module> ast;

  Parsed() {
    sourceMgr.setDiagHandler(
        [](const llvm::SMDiagnostic &diag, void *out) {
          llvm::raw_string_ostream os(*static_cast<std::string *>(out));
          diag.print("test", os);
        },
        &diagnostics);
    sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(kVariants, "v.flash"),
                                 llvm::SMLoc());
    ast = frontend::parseFlashFile(sourceMgr);
  }
  const frontend::Variant &variant(llvm::StringRef name) const { return *ast->lookup(name); }
};

config::KernelConfig resolve(const Parsed &parsed, llvm::StringRef chip,
                             std::optional<int64_t> headDim, std::optional<int64_t> queryLength,
                             const config::ConfigRequest &request = {}) {
  config::ResolveOptions options;
  options.chip = chip.str();
  options.request = request;
  options.sizes.headDim = headDim;
  options.sizes.queryLength = queryLength;
  llvm::Expected<config::KernelConfig> resolved =
      config::resolveKernelConfig(options, *parsed.ast);
  EXPECT_TRUE(bool(resolved)) << (resolved ? "" : llvm::toString(resolved.takeError()));
  return std::move(*resolved);
}

std::pair<int64_t, int64_t> tileOf(const config::KernelConfig &resolved,
                                   const frontend::Variant &variant, int64_t headDim) {
  config::TileChoice tile = resolved.tileFor(variant, headDim);
  return {tile.blockRows, tile.blockCols};
}

using Tile = std::pair<int64_t, int64_t>;

TEST(KernelConfig, DefaultTilesFollowTheRules) {
  Parsed parsed;
  ASSERT_TRUE(parsed.ast) << parsed.diagnostics;
  config::KernelConfig hopper = resolve(parsed, "sm_90a", 128, 4096);
  EXPECT_EQ(hopper.gemm(), "wgmma");
  EXPECT_EQ(tileOf(hopper, parsed.variant("causal"), 128), Tile(128, 128));
  EXPECT_EQ(tileOf(hopper, parsed.variant("causal"), 64), Tile(64, 128));
  EXPECT_EQ(tileOf(hopper, parsed.variant("causal"), 256), Tile(128, 80));
  EXPECT_EQ(tileOf(hopper, parsed.variant("document"), 128), Tile(128, 96));
  EXPECT_EQ(tileOf(hopper, parsed.variant("document"), 256), Tile(128, 32));
  // Keys in pieces take the one-warpgroup 64 x 64 walk up to D = 128 (the
  // fastest measured), the warp-specialized walk with Bc = 64 at D = 256;
  // a prefix beside the causal range is one piece.
  EXPECT_EQ(tileOf(hopper, parsed.variant("sink_window"), 128), Tile(64, 64));
  EXPECT_EQ(tileOf(hopper, parsed.variant("sink_window"), 64), Tile(64, 64));
  EXPECT_EQ(tileOf(hopper, parsed.variant("sink_window"), 256), Tile(128, 64));
  EXPECT_EQ(tileOf(hopper, parsed.variant("prefix_lm"), 128), Tile(128, 128));
  // Short masked queries keep it too; short unmasked ones do not.
  config::KernelConfig shortQueries = resolve(parsed, "sm_90a", 128, 512);
  EXPECT_EQ(tileOf(shortQueries, parsed.variant("causal"), 128), Tile(64, 64));
  EXPECT_EQ(tileOf(shortQueries, parsed.variant("full"), 128), Tile(128, 128));
  EXPECT_EQ(tileOf(shortQueries, parsed.variant("causal"), 256), Tile(128, 64));

  config::KernelConfig ampere = resolve(parsed, "sm_80", 128, std::nullopt);
  EXPECT_EQ(ampere.gemm(), "mma.sync");
  EXPECT_EQ(tileOf(ampere, parsed.variant("full"), 128), Tile(128, 64));
  EXPECT_EQ(tileOf(ampere, parsed.variant("causal"), 128), Tile(128, 32));
  EXPECT_EQ(tileOf(ampere, parsed.variant("softcap"), 128), Tile(128, 32));
  EXPECT_EQ(tileOf(ampere, parsed.variant("document"), 128), Tile(128, 64));
  EXPECT_EQ(tileOf(ampere, parsed.variant("causal"), 256), Tile(64, 64));
  EXPECT_EQ(hopper.source(), "default tile");
}

TEST(KernelConfig, DefaultBackwardTilesFollowTheRules) {
  Parsed parsed;
  ASSERT_TRUE(parsed.ast) << parsed.diagnostics;
  auto backwardTile = [&](const config::KernelConfig &resolved, llvm::StringRef variant,
                          int64_t headDim) {
    config::TileChoice tile = resolved.backwardTileFor(parsed.variant(variant), headDim);
    return Tile(tile.blockRows, tile.blockCols);
  };
  config::KernelConfig hopper = resolve(parsed, "sm_90a", 128, 4096);
  // wgmma: two warpgroups of 64 keys and Br = 128 at D <= 64, one
  // warpgroup and Br = 32 there for N <= 1024 (unmasked 512, 2048 with a bias score or
  // tensor reads) or with a score mod, tensor
  // reads or keys in pieces; two warpgroups and Br = 64 above, Br = 32
  // again with a score mod or tensor reads.
  EXPECT_EQ(backwardTile(hopper, "causal", 64), Tile(128, 128));
  EXPECT_EQ(backwardTile(hopper, "full", 64), Tile(128, 128));
  EXPECT_EQ(backwardTile(hopper, "softcap", 64), Tile(32, 64));
  EXPECT_EQ(backwardTile(hopper, "document", 64), Tile(32, 64));
  // Keys in pieces and tensor reads per (b, h) keep the plain score
  // element's work: the 128 x 128 tile; a bias score (ALiBi), 64 x 128.
  EXPECT_EQ(backwardTile(hopper, "sink_window", 64), Tile(128, 128));
  EXPECT_EQ(backwardTile(hopper, "alibi", 64), Tile(64, 128));
  EXPECT_EQ(backwardTile(hopper, "relative_bias", 64), Tile(32, 64));
  EXPECT_EQ(backwardTile(hopper, "key_padding", 64), Tile(128, 128));
  config::KernelConfig hopperShort = resolve(parsed, "sm_90a", 64, 1024);
  EXPECT_EQ(backwardTile(hopperShort, "causal", 64), Tile(32, 64));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 1025), "causal", 64), Tile(128, 128));
  // Without a mask the one warpgroup stays up to N = 512 (the 128 x 128
  // tile's dQ writer adds in any order there), and up to 2048 with a bias
  // score or tensor reads per (b, h).
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 512), "full", 64), Tile(32, 64));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 513), "full", 64), Tile(128, 128));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 2048), "full", 64), Tile(128, 128));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 2048), "causal", 64), Tile(128, 128));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 2048), "biased_twice", 64), Tile(32, 64));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 2049), "biased_twice", 64), Tile(64, 128));
  // Where the caller chose how dQ is added (--dq-writer either way,
  // --bwd-rotate-tiles, --defer-turns), up to 2048 as before.
  config::ConfigRequest chosen;
  chosen.queryGradAddsByDefault = false;
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 1024, chosen), "full", 64), Tile(32, 64));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 2049, chosen), "full", 64), Tile(128, 128));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, std::nullopt), "causal", 64),
            Tile(128, 128));
  // Deterministic mode wants two warpgroups (the dQ writer) at any N.
  config::ConfigRequest deterministic;
  deterministic.deterministicBackward = true;
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 1024, deterministic), "causal", 64),
            Tile(64, 128));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 1024, deterministic), "full", 64),
            Tile(64, 128));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 1024, deterministic), "softcap", 64),
            Tile(32, 128));
  EXPECT_EQ(backwardTile(resolve(parsed, "sm_90a", 64, 4096, deterministic), "causal", 64),
            Tile(128, 128));
  EXPECT_EQ(backwardTile(hopper, "causal", 128), Tile(64, 128));
  EXPECT_EQ(backwardTile(hopper, "full", 96), Tile(64, 128));
  EXPECT_EQ(backwardTile(hopper, "softcap", 128), Tile(32, 128));
  EXPECT_EQ(backwardTile(hopper, "document", 128), Tile(32, 128));
  // --bwd-tile: the asked-for side wins, the rule fills in the other; the
  // forward keeps its rule.
  config::ConfigRequest request;
  request.backwardBlockRows = 64;
  config::KernelConfig asked = resolve(parsed, "sm_90a", 128, 4096, request);
  EXPECT_EQ(backwardTile(asked, "causal", 64), Tile(64, 128));
  EXPECT_EQ(tileOf(asked, parsed.variant("causal"), 128), Tile(128, 128));
  EXPECT_EQ(asked.backwardSource(), "command line");
  config::KernelConfig ampere = resolve(parsed, "sm_80", 128, std::nullopt);
  EXPECT_EQ(backwardTile(ampere, "causal", 64), Tile(64, 128));
  EXPECT_EQ(backwardTile(ampere, "causal", 128), Tile(32, 128));
  // Above D = 128 each CTA keeps 128 columns of dK and dV (two column
  // slices at D = 256): two warpgroups and Br = 32 on wgmma (218 KB of
  // shared memory), 4 warps on mma.sync with Br = 16 where tensor reads
  // would spill at 32.
  EXPECT_EQ(backwardTile(hopper, "causal", 256), Tile(32, 128));
  EXPECT_EQ(backwardTile(hopper, "document", 256), Tile(32, 128));
  EXPECT_EQ(backwardTile(ampere, "causal", 256), Tile(32, 64));
  EXPECT_EQ(backwardTile(ampere, "document", 256), Tile(16, 64));
  EXPECT_EQ(config::backwardColumnSlices(64), 1);
  EXPECT_EQ(config::backwardColumnSlices(128), 1);
  EXPECT_EQ(config::backwardColumnSlices(256), 2);
}

// The backward adds dQ in key-block order by default where that measured
// faster: wgmma at D >= 128 or <= 64, keys admitted as a prefix or all of them, no
// score mod and no tensor reads, except unmasked at D <= 64 and a known N <=
// 8192, where the dQ writer adds in any order; never where the caller
// chose (an explicit --deterministic takes the order anyway, as
// determinism).
TEST(KernelConfig, OrderedQueryGradsByDefaultFollowTheRule) {
  Parsed parsed;
  ASSERT_TRUE(parsed.ast) << parsed.diagnostics;
  config::KernelConfig hopper = resolve(parsed, "sm_90a", 128, 4096);
  auto adds = [&](const config::KernelConfig &resolved, llvm::StringRef variant,
                  int64_t headDim) {
    return resolved.queryGradAddsFor(parsed.variant(variant), headDim);
  };
  auto ordered = [&](const config::KernelConfig &resolved, llvm::StringRef variant,
                     int64_t headDim) {
    return adds(resolved, variant, headDim) == config::QueryGradAdds::KeyBlockOrder;
  };
  EXPECT_TRUE(ordered(hopper, "causal", 128));
  EXPECT_TRUE(ordered(hopper, "full", 128));
  EXPECT_TRUE(ordered(hopper, "prefix_lm", 128));
  EXPECT_TRUE(ordered(hopper, "causal", 256));
  EXPECT_TRUE(ordered(hopper, "causal", 64));
  EXPECT_EQ(adds(hopper, "full", 64), config::QueryGradAdds::Writer);
  EXPECT_EQ(adds(hopper, "full", 128), config::QueryGradAdds::KeyBlockOrder);
  EXPECT_TRUE(ordered(resolve(parsed, "sm_90a", 64, 16384), "full", 64));
  EXPECT_EQ(adds(resolve(parsed, "sm_90a", 64, 8192), "full", 64),
            config::QueryGradAdds::Writer);
  EXPECT_TRUE(ordered(resolve(parsed, "sm_90a", 64, std::nullopt), "full", 64));
  EXPECT_TRUE(ordered(resolve(parsed, "sm_90a", 64, 8193), "full", 64));
  EXPECT_EQ(adds(resolve(parsed, "sm_80", 64, 4096), "full", 64),
            config::QueryGradAdds::AnyOrder);
  EXPECT_EQ(adds(hopper, "softcap", 64), config::QueryGradAdds::AnyOrder);
  EXPECT_FALSE(ordered(hopper, "softcap", 64));
  EXPECT_FALSE(ordered(hopper, "full", 96));
  EXPECT_FALSE(ordered(hopper, "document", 128));
  EXPECT_FALSE(ordered(hopper, "softcap", 128));
  EXPECT_FALSE(ordered(resolve(parsed, "sm_80", 128, std::nullopt), "causal", 128));
  config::ConfigRequest chosen;
  chosen.queryGradAddsByDefault = false;
  EXPECT_FALSE(ordered(resolve(parsed, "sm_90a", 128, 4096, chosen), "causal", 128));
  config::ConfigRequest deterministic;
  deterministic.deterministicBackward = true;
  EXPECT_FALSE(ordered(resolve(parsed, "sm_90a", 128, 4096, deterministic), "causal", 128));
  // Nor the writer where the caller chose.
  EXPECT_EQ(adds(resolve(parsed, "sm_90a", 64, 4096, chosen), "full", 64),
            config::QueryGradAdds::AnyOrder);
  EXPECT_EQ(adds(resolve(parsed, "sm_90a", 64, 4096, deterministic), "full", 64),
            config::QueryGradAdds::AnyOrder);
  // A window bounds the keys from below: not ordered (it measured slower).
  config::VariantTraits window;
  window.masked = true;
  window.maskKeys = config::KeySet::Interval;
  EXPECT_EQ(config::defaultQueryGradAdds(128, "wgmma", window), config::QueryGradAdds::AnyOrder);
  window.maskKeys = config::KeySet::Prefix;
  EXPECT_EQ(config::defaultQueryGradAdds(128, "wgmma", window),
            config::QueryGradAdds::KeyBlockOrder);
}

// What the backward's D <= 64 tile rule reads in a score and a mask: a
// score mod that adds a term free of s, tensor reads indexed without i, j.
TEST(KernelConfig, TraitsTellBiasesAndUniformTensorReads) {
  Parsed parsed;
  ASSERT_TRUE(parsed.ast) << parsed.diagnostics;
  auto traits = [&](llvm::StringRef variant) { return config::traitsOf(parsed.variant(variant)); };
  EXPECT_TRUE(traits("alibi").scoreIsBias);
  EXPECT_TRUE(traits("alibi").tensorReadsAreUniform);
  EXPECT_TRUE(traits("key_padding").tensorReadsAreUniform);
  EXPECT_FALSE(traits("key_padding").scoreIsBias);
  EXPECT_FALSE(traits("document").tensorReadsAreUniform);
  EXPECT_TRUE(traits("relative_bias").scoreIsBias);
  EXPECT_FALSE(traits("relative_bias").tensorReadsAreUniform);
  EXPECT_FALSE(traits("softcap").scoreIsBias);
  EXPECT_FALSE(traits("reversed").scoreIsBias);
  EXPECT_TRUE(traits("biased_twice").scoreIsBias);
  EXPECT_TRUE(traits("full").tensorReadsAreUniform);
}

TEST(KernelConfig, ARequestWinsKnobByKnob) {
  Parsed parsed;
  ASSERT_TRUE(parsed.ast) << parsed.diagnostics;
  config::ConfigRequest request;
  request.blockRows = 192;
  config::KernelConfig resolved = resolve(parsed, "sm_90a", 128, 4096, request);
  // Bc still comes from the rule, and the source says what was asked.
  EXPECT_EQ(tileOf(resolved, parsed.variant("causal"), 128), Tile(192, 128));
  EXPECT_EQ(resolved.source(), "command line");
  EXPECT_NE(resolved.tileFor(parsed.variant("causal"), 128).why.find("Br from the command line"),
            std::string::npos);

  // warp-specialize=off changes the default tile; mma.sync on Hopper too.
  config::ConfigRequest off;
  off.warpSpecialize = "off";
  EXPECT_EQ(tileOf(resolve(parsed, "sm_90a", 128, 4096, off), parsed.variant("causal"), 128),
            Tile(64, 64));
  config::ConfigRequest sync;
  sync.gemm = "mma.sync";
  config::KernelConfig onHopper = resolve(parsed, "sm_90a", 128, 4096, sync);
  EXPECT_EQ(onHopper.gemm(), "mma.sync");
  EXPECT_EQ(tileOf(onHopper, parsed.variant("causal"), 128), Tile(128, 32));
  EXPECT_EQ(onHopper.target().gemm, "mma.sync");

  // A tuned winner is a request with every knob set.
  tuning::TileConfig winner{128, 64, "wgmma", "tma", 0};
  winner.persistent = false;
  config::KernelConfig tuned = resolve(parsed, "sm_90a", 128, 4096, winner.request());
  EXPECT_FALSE(tuned.target().persistent);
  EXPECT_EQ(tileOf(tuned, parsed.variant("document"), 128), Tile(128, 64));
}

TEST(KernelConfig, PersistentGridByQueryLength) {
  Parsed parsed;
  ASSERT_TRUE(parsed.ast) << parsed.diagnostics;
  const frontend::Variant &causal = parsed.variant("causal");
  const frontend::Variant &document = parsed.variant("document");
  // Up to N = 8192 every variant; above, those without aux tensors.
  config::KernelConfig upTo8k = resolve(parsed, "sm_90a", 128, 8192);
  EXPECT_TRUE(upTo8k.persistentGridAsked(causal));
  EXPECT_TRUE(upTo8k.persistentGridAsked(document));
  config::KernelConfig at16k = resolve(parsed, "sm_90a", 128, 16384);
  EXPECT_TRUE(at16k.persistentGridAsked(causal));
  EXPECT_TRUE(at16k.persistentGridAsked(parsed.variant("full")));
  EXPECT_FALSE(at16k.persistentGridAsked(document));
  EXPECT_TRUE(at16k.target().persistent);
  EXPECT_FALSE(at16k.target().persistentWithTensors);
  EXPECT_EQ(at16k.asTileConfig(document, 128).str(), "Br=128 Bc=96 wgmma tma per-tile");
  config::KernelConfig unknownN = resolve(parsed, "sm_90a", 128, std::nullopt);
  EXPECT_FALSE(unknownN.persistentGridAsked(causal));
  EXPECT_FALSE(unknownN.persistentGridAsked(document));
  // An asked-for grid applies to every variant, aux tensors or not.
  config::ConfigRequest request;
  request.persistent = true;
  config::KernelConfig asked = resolve(parsed, "sm_90a", 128, 16384, request);
  EXPECT_TRUE(asked.persistentGridAsked(document));
  EXPECT_EQ(asked.asTileConfig(document, 128).str(), "Br=128 Bc=96 wgmma tma persistent");
  request.persistent = false;
  EXPECT_FALSE(
      resolve(parsed, "sm_90a", 128, 4096, request).persistentGridAsked(causal));

  // --verbose says why, and that D = 256 with Bc = 80 stays off the grid.
  config::KernelConfig resolved = resolve(parsed, "sm_90a", 256, 4096);
  std::string why;
  for (const std::string &line : resolved.why(parsed.variant("causal"), 256))
    why += line + "\n";
  EXPECT_NE(why.find("tile Br=128 Bc=80: warp-specialized wgmma tile at D = 256"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("persistent (N = 4096 <= 8192)"), std::string::npos) << why;
  EXPECT_NE(why.find("only Bc <= 64 fits the persistent grid"), std::string::npos) << why;
  why.clear();
  for (const std::string &line : at16k.why(document, 128))
    why += line + "\n";
  EXPECT_NE(why.find("grid of warp-specialized tiles: one CTA per tile (N = 16384 > 8192 and "
                     "the variant reads aux tensors)"),
            std::string::npos)
      << why;
  // ... and the tuner names that default as the per-tile kernel it is.
  EXPECT_EQ(resolved.asTileConfig(parsed.variant("causal"), 256).str(),
            "Br=128 Bc=80 wgmma tma per-tile");
  EXPECT_EQ(resolve(parsed, "sm_90a", 128, 4096).asTileConfig(parsed.variant("causal"), 128).str(),
            "Br=128 Bc=128 wgmma tma persistent");
}

TEST(KernelConfig, BadRequestsAreErrors) {
  Parsed parsed;
  ASSERT_TRUE(parsed.ast) << parsed.diagnostics;
  config::ResolveOptions options;
  options.chip = "sm_80";
  options.request.gemm = "wgmma";
  llvm::Expected<config::KernelConfig> resolved = config::resolveKernelConfig(options, *parsed.ast);
  ASSERT_FALSE(bool(resolved));
  EXPECT_EQ(llvm::toString(resolved.takeError()), "wgmma needs --arch=sm_90a, not sm_80");
  options.request.gemm = "hmma";
  resolved = config::resolveKernelConfig(options, *parsed.ast);
  ASSERT_FALSE(bool(resolved));
  EXPECT_EQ(llvm::toString(resolved.takeError()),
            "unknown GEMM kind 'hmma' (expected auto, mma.sync or wgmma)");

  config::ConfigRequest request;
  EXPECT_FALSE(bool(config::parseTile("Br=64,Bc=32", request)));
  EXPECT_EQ(request.blockRows, std::optional<int64_t>(64));
  EXPECT_EQ(request.blockCols, std::optional<int64_t>(32));
  EXPECT_EQ(llvm::toString(config::parseTile("Bx=1", request)),
            "--tile: unknown key 'Bx' (expected one of Br, Bc)");
  EXPECT_EQ(llvm::toString(config::parseTile("Br=0", request)),
            "--tile: 'Br=0' is not Br=<positive integer>");
  // --bwd-tile fills the backward's own tile and leaves the forward's.
  config::ConfigRequest backward;
  EXPECT_FALSE(bool(config::parseTile("Br=32", backward, /*backward=*/true)));
  EXPECT_EQ(backward.backwardBlockRows, std::optional<int64_t>(32));
  EXPECT_FALSE(backward.backwardBlockCols);
  EXPECT_FALSE(backward.blockRows);
  EXPECT_TRUE(backward.empty());
  EXPECT_EQ(llvm::toString(config::parseTile("Bc=x", backward, /*backward=*/true)),
            "--bwd-tile: 'Bc=x' is not Bc=<positive integer>");
}

TEST(KernelConfig, IRGenChoosesNoTileItself) {
  Parsed parsed;
  ASSERT_TRUE(parsed.ast) << parsed.diagnostics;
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  frontend::KernelOptions none;
  EXPECT_FALSE(frontend::emitFlashIR(context, *parsed.ast, none, parsed.sourceMgr, "causal"));
  EXPECT_NE(parsed.diagnostics.find("variant 'causal' has no tile"), std::string::npos)
      << parsed.diagnostics;
  // With the resolver's options every variant gets its own tile.
  mlir::OwningOpRef<mlir::ModuleOp> module = frontend::emitFlashIR(
      context, *parsed.ast, resolve(parsed, "sm_90a", 128, 4096).kernelOptions(128),
      parsed.sourceMgr);
  ASSERT_TRUE(module) << parsed.diagnostics;
  std::map<std::string, Tile> tiles;
  for (flash::KernelOp kernel : module->getOps<flash::KernelOp>())
    tiles[kernel.getSymName().str()] = {kernel.getConfig().getBr(), kernel.getConfig().getBc()};
  EXPECT_EQ(tiles["causal"], Tile(128, 128));
  EXPECT_EQ(tiles["document"], Tile(128, 96));
  EXPECT_EQ(tiles["prefix_lm"], Tile(128, 128));
  EXPECT_EQ(tiles["sink_window"], Tile(64, 64));
}

TEST(KernelConfig, KeyPiecesAgreeWithTheLoweringsAnalysis) {
  // config::traitsOf answers on the AST (the backward tile is chosen before
  // IR exists) and flash::keysMayComeInPieces on the IR the lowerings walk
  // by; a disagreement would give a walking kernel the tile of one that
  // does not walk, or the reverse.
  struct {
    const char *mask;
    bool pieces;
  } cases[] = {
      {"j <= i", false},
      {"j < prefix || j <= i", false},
      {"i > 100 || j < 10", false},
      {"!(j > i)", false},
      {"j <= i && i - j < 64", false},
      {"doc[b, i] == doc[b, j] && j <= i", false},
      {"j * 2 < i || j < 3", false},
      {"j < 4 || (j <= i && i - j < 256)", true},
      {"j >= i || j < 2", true},
      {"!(j <= i && i - j < 64)", true},
      {"(j < 10 || j > 100) && j < i", true},
      {"select(i > 3, j < i, j > i)", true},
      {"i / 64 == j / 64 || j < 1", true},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.mask);
    std::string source = std::string("attention t {\n  tensor doc: i32[B, N]\n  param prefix: "
                                     "i32 = 128\n  mask = ") +
                         c.mask + "\n}\n";
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(source, "t.flash"),
                                 llvm::SMLoc());
    std::optional<frontend::Module> ast = frontend::parseFlashFile(sourceMgr);
    ASSERT_TRUE(ast);
    const frontend::Variant &variant = *ast->lookup("t");
    EXPECT_EQ(config::traitsOf(variant).maskMayLeaveHoles, c.pieces);

    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    mlir::MLIRContext context(registry);
    frontend::KernelOptions options;
    options.blockRows = 64;
    options.blockCols = 64;
    options.headDim = 64;
    mlir::OwningOpRef<mlir::ModuleOp> module =
        frontend::emitFlashIR(context, *ast, options, sourceMgr);
    ASSERT_TRUE(module);
    flash::MaskOp mask;
    module->walk([&](flash::MaskOp op) { mask = op; });
    ASSERT_TRUE(mask);
    EXPECT_EQ(flash::keysMayComeInPieces(mask), c.pieces);
  }
}

} // namespace

TEST(KernelRules, PagedCachesAreWarpSpecializedWhereBoxesNest) {
  // Not paged: the rule does not restrict.
  EXPECT_TRUE(config::warpSpecializationApplies(0, "tma", 128, 128));
  EXPECT_TRUE(config::warpSpecializationApplies(0, "tma", 256, 80));
  // Paged: TMA boxes that nest with Bc, D <= 128.
  EXPECT_TRUE(config::warpSpecializationApplies(16, "tma", 128, 128));
  EXPECT_TRUE(config::warpSpecializationApplies(256, "tma", 64, 128));
  EXPECT_FALSE(config::warpSpecializationApplies(48, "tma", 128, 128));
  EXPECT_FALSE(config::warpSpecializationApplies(64, "tma", 128, 96));
  EXPECT_FALSE(config::warpSpecializationApplies(16, "cp.async", 128, 128));
  EXPECT_FALSE(config::warpSpecializationApplies(16, "tma", 256, 80));
  // auto: two or more consumer warpgroups; the persistent grid never runs a
  // paged kernel.
  EXPECT_TRUE(config::warpSpecializesByDefault(128));
  EXPECT_TRUE(config::warpSpecializesByDefault(192));
  EXPECT_FALSE(config::warpSpecializesByDefault(64));
  EXPECT_TRUE(config::persistentGridApplies(false, false, true));
  EXPECT_FALSE(config::persistentGridApplies(false, /*pagedKV=*/true, false));
  EXPECT_FALSE(config::persistentGridApplies(/*varlen=*/true, false, /*readsTensors=*/true));
}

TEST(KernelRules, BackwardBarrierMergeByHeadDim) {
  // Three Q/dO stages where measured faster (D <= 64), level 2 above.
  EXPECT_EQ(config::defaultBackwardBarrierMerge(32), 3);
  EXPECT_EQ(config::defaultBackwardBarrierMerge(64), 3);
  EXPECT_EQ(config::defaultBackwardBarrierMerge(96), 2);
  EXPECT_EQ(config::defaultBackwardBarrierMerge(128), 2);
  EXPECT_EQ(config::defaultBackwardBarrierMerge(256), 2);
}
