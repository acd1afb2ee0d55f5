//===- Tuning.cpp - Tile configurations, their space and their cache ------===//

#include "flashc/Tuning/Tuning.h"

#include "flashc/Dialect/Flash/Transforms/Passes.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/Target/Package/KernelPackage.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <mutex>

using namespace flashc;
using namespace flashc::tuning;
namespace json = llvm::json;

std::string TileConfig::str() const {
  std::string text = "Br=" + std::to_string(blockRows) + " Bc=" + std::to_string(blockCols) +
                     " " + gemm;
  if (backward)
    return text;
  if (gemm == "wgmma") {
    text += " " + kvCopy;
    if (kvCopy == "tma" && overlapSoftmax)
      text += " overlap";
    if (persistent)
      text += *persistent ? " persistent" : " per-tile";
  } else if (rowsPerWarp)
    text += " rpw=" + std::to_string(rowsPerWarp);
  return text;
}

config::ConfigRequest TileConfig::request() const {
  config::ConfigRequest request;
  request.blockRows = blockRows;
  request.blockCols = blockCols;
  request.gemm = gemm;
  request.kvCopy = kvCopy;
  request.rowsPerWarp = rowsPerWarp;
  request.overlapSoftmax = overlapSoftmax;
  request.persistent = persistent;
  if (backward) {
    // The forward's knobs stay unset: the forward of the same compilation
    // keeps its own configuration.
    request.kvCopy.reset();
    request.rowsPerWarp.reset();
    request.overlapSoftmax.reset();
    request.persistent.reset();
  }
  return request;
}

bool TileConfig::operator==(const TileConfig &other) const {
  return blockRows == other.blockRows && blockCols == other.blockCols &&
         gemm == other.gemm && kvCopy == other.kvCopy && rowsPerWarp == other.rowsPerWarp &&
         overlapSoftmax == other.overlapSoftmax && persistent == other.persistent &&
         backward == other.backward;
}

llvm::Expected<SearchSpace> SearchSpace::parse(llvm::ArrayRef<std::string> items) {
  return parseOnto(items, SearchSpace());
}

llvm::Expected<SearchSpace> SearchSpace::parseOnto(llvm::ArrayRef<std::string> items,
                                                   SearchSpace space) {
  for (llvm::StringRef item : items) {
    auto [key, list] = item.split('=');
    llvm::SmallVector<llvm::StringRef> values;
    list.split(values, ',', -1, /*KeepEmpty=*/false);
    auto fail = [&](const llvm::Twine &why) {
      return llvm::createStringError("--space: '" + item + "': " + why);
    };
    if (values.empty())
      return fail("expected KNOB=VALUE[,VALUE...]");
    auto integers = [&](std::vector<int64_t> &out) -> llvm::Error {
      out.clear();
      for (llvm::StringRef value : values) {
        int64_t number;
        if (value.getAsInteger(10, number) || number < 0)
          return fail("'" + value + "' is not a non-negative integer");
        out.push_back(number);
      }
      return llvm::Error::success();
    };
    auto words = [&](std::vector<std::string> &out,
                     std::initializer_list<llvm::StringRef> allowed) -> llvm::Error {
      out.clear();
      for (llvm::StringRef value : values) {
        if (!llvm::is_contained(allowed, value))
          return fail("'" + value + "' is not one of " + llvm::join(allowed, ", "));
        out.push_back(value.str());
      }
      return llvm::Error::success();
    };
    llvm::Error error = llvm::Error::success();
    if (key == "Br")
      error = integers(space.blockRows);
    else if (key == "Bc")
      error = integers(space.blockCols);
    else if (key == "rpw")
      error = integers(space.rowsPerWarp);
    else if (key == "gemm")
      error = words(space.gemm, {"wgmma", "mma.sync"});
    else if (key == "kv")
      error = words(space.kvCopy, {"tma", "cp.async"});
    else if (key == "overlap") {
      std::vector<std::string> switches;
      error = words(switches, {"on", "off"});
      space.overlapSoftmax.clear();
      for (const std::string &value : switches)
        space.overlapSoftmax.push_back(value == "on");
    } else if (key == "persistent") {
      std::vector<std::string> switches;
      error = words(switches, {"on", "off"});
      space.persistent.clear();
      for (const std::string &value : switches)
        space.persistent.push_back(value == "on");
    } else
      return fail("unknown knob '" + key +
                  "' (knobs: Br, Bc, gemm, kv, overlap, persistent, rpw)");
    if (error)
      return std::move(error);
  }
  return space;
}

llvm::Expected<SearchSpace> SearchSpace::parseBackward(llvm::ArrayRef<std::string> items) {
  for (llvm::StringRef item : items) {
    llvm::StringRef key = item.split('=').first;
    if (llvm::is_contained({"kv", "overlap", "persistent", "rpw"}, key))
      return llvm::createStringError("--space: '" + item + "': '" + key +
                                     "' is a knob of the forward kernel (the backward's "
                                     "knobs: Br, Bc, gemm)");
  }
  SearchSpace defaults;
  defaults.blockRows = {32, 64, 128};
  defaults.blockCols = {64, 128};
  return parseOnto(items, defaults);
}

std::vector<TileConfig> SearchSpace::enumerateBackward() const {
  std::vector<TileConfig> configs;
  for (const std::string &kind : gemm)
    for (int64_t br : blockRows)
      for (int64_t bc : blockCols) {
        TileConfig config{br, bc, kind, "cp.async", 0, /*overlapSoftmax=*/false};
        config.backward = true;
        configs.push_back(config);
      }
  return configs;
}

std::vector<TileConfig> SearchSpace::enumerate() const {
  std::vector<TileConfig> configs;
  for (const std::string &kind : gemm)
    for (int64_t br : blockRows)
      for (int64_t bc : blockCols) {
        // kv-copy is a knob of the wgmma kernel, rows-per-warp of mma.sync's.
        if (kind == "wgmma") {
          for (const std::string &copy : kvCopy) {
            if (copy != "tma") {
              configs.push_back({br, bc, kind, copy, 0, /*overlapSoftmax=*/false});
              continue;
            }
            // Two or more warpgroups are warp-specialized (warp-specialize=auto),
            // which always overlaps: the knob only changes 64-row tiles;
            // the grid is a knob of those larger tiles only.
            if (br >= 128) {
              for (bool grid : persistent)
                configs.push_back({br, bc, kind, copy, 0, /*overlapSoftmax=*/false, grid});
              continue;
            }
            for (bool overlap : overlapSoftmax)
              configs.push_back({br, bc, kind, copy, 0, overlap});
          }
        } else {
          for (int64_t rows : rowsPerWarp)
            configs.push_back({br, bc, kind, "cp.async", rows, /*overlapSoftmax=*/false});
        }
      }
  return configs;
}

std::string tuning::shapeBucket(int64_t queryLen, int64_t keyLen) {
  return "N<=" + std::to_string(llvm::PowerOf2Ceil(queryLen)) +
         ",M<=" + std::to_string(llvm::PowerOf2Ceil(keyLen));
}

std::optional<TuningKey> tuning::makeKey(mlir::MLIRContext &context,
                                         const frontend::Module &ast,
                                         llvm::SourceMgr &sourceMgr, llvm::StringRef variant,
                                         int64_t headDim, int64_t queryLen, int64_t keyLen,
                                         llvm::StringRef gpu, int computeCapability,
                                         bool backward, std::optional<int64_t> pageSize) {
  // The syntax tree points into `sourceMgr`'s buffer; only its handler changes.
  llvm::SourceMgr::DiagHandlerTy handler = sourceMgr.getDiagHandler();
  void *handlerContext = sourceMgr.getDiagContext();
  sourceMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
  auto restore =
      llvm::scope_exit([&] { sourceMgr.setDiagHandler(handler, handlerContext); });
  frontend::KernelOptions options;
  options.blockRows = kKeyTileRows;
  options.blockCols = kKeyTileCols;
  options.headDim = headDim;
  options.backward = backward;
  options.pageSize = pageSize;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      frontend::emitFlashIR(context, ast, options, sourceMgr, variant);
  if (!module)
    return std::nullopt;
  mlir::PassManager pm(&context);
  flash::buildFlashPipeline(pm);
  if (mlir::failed(pm.run(*module)))
    return std::nullopt;
  // The module holds the one kernel op of the pass asked for.
  auto kernels = module->getOps<flash::KernelSignature>();
  if (kernels.empty())
    return std::nullopt;
  flash::KernelSignature kernel = *kernels.begin();
  TuningKey key;
  key.pass = backward ? "backward" : "forward";
  key.variant = variantHash(kernel);
  llvm::raw_string_ostream(key.elementType) << kernel.getElementType();
  key.headDim = headDim;
  key.shapeBucket = shapeBucket(queryLen, keyLen);
  key.gpu = gpu.str();
  key.computeCapability = computeCapability;
  key.flashcVersion = FLASHC_VERSION;
  return key;
}

//===----------------------------------------------------------------------===//
// The cache file
//===----------------------------------------------------------------------===//

static constexpr int kFormat = 1;

static json::Object toJson(const TuningEntry &entry) {
  const TuningKey &k = entry.key;
  const TileConfig &c = entry.config;
  return json::Object{
      {"pass", k.pass},
      {"variant", k.variant},
      {"element_type", k.elementType},
      {"head_dim", k.headDim},
      {"shape_bucket", k.shapeBucket},
      {"gpu", k.gpu},
      {"compute_capability", k.computeCapability},
      {"flashc_version", k.flashcVersion},
      {"config", json::Object{{"Br", c.blockRows},
                              {"Bc", c.blockCols},
                              {"gemm", c.gemm},
                              {"kv_copy", c.kvCopy},
                              {"rows_per_warp", c.rowsPerWarp},
                              {"overlap_softmax", c.overlapSoftmax},
                              {"persistent", c.persistent ? json::Value(*c.persistent)
                                                          : json::Value(nullptr)}}},
      {"tflops", entry.tflops},
  };
}

static std::optional<TuningEntry> fromJson(const json::Value &value) {
  const json::Object *object = value.getAsObject();
  if (!object)
    return std::nullopt;
  TuningEntry entry;
  json::Path::Root root;
  json::ObjectMapper map(value, root);
  const json::Value *config = object->get("config");
  if (!config || !config->getAsObject() || !map.map("variant", entry.key.variant) ||
      !map.map("element_type", entry.key.elementType) ||
      !map.map("head_dim", entry.key.headDim) ||
      !map.map("shape_bucket", entry.key.shapeBucket) || !map.map("gpu", entry.key.gpu) ||
      !map.map("compute_capability", entry.key.computeCapability) ||
      !map.map("flashc_version", entry.key.flashcVersion) || !map.map("tflops", entry.tflops) ||
      !map.mapOptional("pass", entry.key.pass))
    return std::nullopt;
  // Entries written before the backward had winners have no "pass".
  if (entry.key.pass != "forward" && entry.key.pass != "backward")
    return std::nullopt;
  entry.config.backward = entry.key.pass == "backward";
  json::ObjectMapper configMap(*config, root);
  TileConfig &c = entry.config;
  if (!configMap.map("Br", c.blockRows) || !configMap.map("Bc", c.blockCols) ||
      !configMap.map("gemm", c.gemm) || !configMap.map("kv_copy", c.kvCopy) ||
      !configMap.map("rows_per_warp", c.rowsPerWarp) ||
      !configMap.mapOptional("overlap_softmax", c.overlapSoftmax) ||
      !configMap.mapOptional("persistent", c.persistent))
    return std::nullopt;
  if (c.blockRows <= 0 || c.blockCols <= 0 || (c.gemm != "wgmma" && c.gemm != "mma.sync") ||
      (c.kvCopy != "tma" && c.kvCopy != "cp.async"))
    return std::nullopt;
  return entry;
}

static bool sameKey(const TuningKey &a, const TuningKey &b, bool withVersion) {
  return a.pass == b.pass && a.variant == b.variant && a.elementType == b.elementType &&
         a.headDim == b.headDim &&
         a.shapeBucket == b.shapeBucket && a.gpu == b.gpu &&
         a.computeCapability == b.computeCapability &&
         (!withVersion || a.flashcVersion == b.flashcVersion);
}

std::string TuningCache::defaultPath() {
  llvm::SmallString<256> path(CompileCache::defaultDirectory());
  llvm::sys::path::append(path, "tuning.json");
  return std::string(path);
}

std::vector<TuningEntry> TuningCache::entries(std::string &warnings) const {
  std::vector<TuningEntry> result;
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(file, /*IsText=*/true);
  if (!buffer)
    return result; // no cache yet
  llvm::Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed) {
    warnings += "ignoring corrupt tuning cache " + file + ": " +
                llvm::toString(parsed.takeError()) + "\n";
    return result;
  }
  const json::Object *root = parsed->getAsObject();
  const json::Array *list = root ? root->getArray("entries") : nullptr;
  std::optional<int64_t> format = root ? root->getInteger("format") : std::nullopt;
  if (!list || format != kFormat) {
    warnings += "ignoring tuning cache " + file + ": not a format-" + std::to_string(kFormat) +
                " flashc tuning cache\n";
    return result;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    if (std::optional<TuningEntry> entry = fromJson((*list)[i]))
      result.push_back(std::move(*entry));
    else
      warnings += "ignoring malformed entry " + std::to_string(i) + " of tuning cache " + file +
                  "\n";
  }
  return result;
}

std::optional<TuningEntry> TuningCache::lookup(const TuningKey &key,
                                               std::string &warnings) const {
  for (TuningEntry &entry : entries(warnings)) {
    if (sameKey(entry.key, key, /*withVersion=*/true))
      return entry;
    if (sameKey(entry.key, key, /*withVersion=*/false))
      warnings += "ignoring stale tuning cache entry (flashc " + entry.key.flashcVersion +
                  ", this is " + key.flashcVersion + ") in " + file + "\n";
  }
  return std::nullopt;
}

llvm::Error TuningCache::record(const TuningEntry &entry, std::string &warnings) const {
  llvm::StringRef dir = llvm::sys::path::parent_path(file);
  if (!dir.empty())
    if (std::error_code error = llvm::sys::fs::create_directories(dir))
      return llvm::createStringError(error, "cannot create " + dir + ": " + error.message());
  // One writer at a time: read, merge and replace under the lock. The file
  // lock (fcntl) excludes other processes, not other threads of this one.
  static std::mutex threads;
  std::lock_guard<std::mutex> threadLock(threads);
  int lockFd;
  std::string lockPath = file + ".lock";
  if (std::error_code error = llvm::sys::fs::openFileForReadWrite(
          lockPath, lockFd, llvm::sys::fs::CD_OpenAlways, llvm::sys::fs::OF_None))
    return llvm::createStringError(error, "cannot open " + lockPath + ": " + error.message());
  if (std::error_code error = llvm::sys::fs::lockFile(lockFd)) {
    llvm::sys::Process::SafelyCloseFileDescriptor(lockFd);
    return llvm::createStringError(error, "cannot lock " + lockPath + ": " + error.message());
  }
  auto unlock = llvm::scope_exit([&] {
    llvm::sys::fs::unlockFile(lockFd);
    llvm::sys::Process::SafelyCloseFileDescriptor(lockFd);
  });

  // Every other entry is kept as it is, even one this flashc cannot read.
  json::Array list;
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(file, /*IsText=*/true);
  if (!buffer && buffer.getError() != std::errc::no_such_file_or_directory)
    return llvm::createStringError(buffer.getError(), "cannot read " + file + ": " +
                                                          buffer.getError().message());
  if (buffer) {
    llvm::Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
    if (!parsed) {
      // Unreadable as JSON: set it aside rather than lose it, start afresh.
      std::string reason = llvm::toString(parsed.takeError());
      std::string backup = file + ".corrupt";
      if (std::error_code error = llvm::sys::fs::rename(file, backup))
        return llvm::createStringError(error, "tuning cache " + file + " is corrupt (" +
                                                  reason + ") and cannot be moved aside: " +
                                                  error.message());
      warnings += "tuning cache " + file + " was corrupt (" + reason + "): moved to " +
                  backup + "\n";
    } else {
      json::Object *root = parsed->getAsObject();
      json::Array *existing = root ? root->getArray("entries") : nullptr;
      if (!existing || root->getInteger("format") != kFormat)
        return llvm::createStringError(
            "tuning cache " + file + " is not a format-" + std::to_string(kFormat) +
            " flashc tuning cache; not overwriting it");
      for (json::Value &value : *existing) {
        std::optional<TuningEntry> old = fromJson(value);
        if (!old || !sameKey(old->key, entry.key, /*withVersion=*/true))
          list.push_back(std::move(value));
      }
    }
  }
  list.push_back(toJson(entry));
  json::Value root = json::Object{{"format", kFormat}, {"entries", std::move(list)}};

  std::string text;
  llvm::raw_string_ostream(text) << llvm::formatv("{0:2}", root) << "\n";
  return writeFileAtomically(file, text);
}
