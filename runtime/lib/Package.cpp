//===- Package.cpp - A compiled kernel and what launching it needs --------===//

#include "flashrt/Package.h"

#include "flashrt/Error.h"

#include <fstream>
#include <sstream>

namespace flashrt {

namespace {

[[noreturn]] void fail(int line, const std::string &message) {
  throw Error(ErrorKind::InvalidArgument,
              "kernel package line " + std::to_string(line) + ": " + message);
}

int64_t toInt(const std::string &word, int line) {
  try {
    size_t used = 0;
    int64_t value = std::stoll(word, &used);
    if (used == word.size())
      return value;
  } catch (const std::exception &) {
  }
  fail(line, "'" + word + "' is not an integer");
}

double toDouble(const std::string &word, int line) {
  try {
    size_t used = 0;
    double value = std::stod(word, &used);
    if (used == word.size())
      return value;
  } catch (const std::exception &) {
  }
  fail(line, "'" + word + "' is not a number");
}

std::string formatDouble(double value) {
  std::ostringstream os;
  os.precision(17);
  os << value;
  return os.str();
}

} // namespace

std::string KernelPackage::serialize() const {
  std::ostringstream os;
  auto list = [&](const char *key, const std::vector<int64_t> &values) {
    os << key;
    for (int64_t v : values)
      os << ' ' << v;
    os << '\n';
  };
  os << "flashc-package " << kFormatVersion << '\n'
     << "flashc-version " << flashcVersion << '\n'
     << "kernel " << kernelName << '\n'
     << "arch " << arch << '\n'
     << "variant-hash " << variantHash << '\n'
     << "element-type " << elementType << '\n'
     << "head-dim " << headDim << '\n'
     << "block-rows " << blockRows << '\n'
     << "block-cols " << blockCols << '\n'
     << "threads " << threadsPerBlock << '\n'
     << "dynamic-shared-bytes " << dynamicSharedBytes << '\n'
     << (persistent    ? "grid persistent tile-counter\n"
         : backward    ? "grid ceil(M/block-cols) HKV B\n"
         : packedHeads ? "grid ceil(G*N/block-rows) HKV B\n"
                       : "grid ceil(N/block-rows) H B\n");
  list("static-sizes", staticSizes);
  list("dim-classes", dimClasses);
  for (const PackageParam &param : params)
    os << "param " << param.name << ' ' << param.type << ' '
       << formatDouble(param.defaultValue) << '\n';
  for (const PackageTensor &tensor : tensors) {
    os << "tensor " << tensor.name << ' ' << tensor.elementType;
    for (const std::string &extent : tensor.extents)
      os << ' ' << extent;
    os << '\n';
  }
  if (kvTensorMaps)
    os << "kv-tensor-maps\n";
  if (backward)
    os << "kind backward\n";
  if (columnSlices != 1)
    os << "column-slices " << columnSlices << '\n';
  if (deterministic)
    os << "deterministic\n";
  if (blockSummary)
    os << "block-summary " << summaryPerBatch << ' ' << summaryPerHead << '\n';
  if (splitKeys)
    os << "split-keys\n";
  if (packedHeads)
    os << "packed-heads\n";
  if (pageSize)
    os << "paged-kv " << pageSize << ' ' << pageTable << ' ' << pageLengths << '\n';
  if (packsQueries() || packsKeys())
    os << "varlen " << (packsQueries() ? varlenQueries : "-") << ' '
       << (packsKeys() ? varlenKeys : "-") << '\n';
  for (const PackageEntry &e : entries)
    os << "entry " << e.role << ' ' << e.name << ' ' << e.threadsPerBlock << ' '
       << e.dynamicSharedBytes << '\n';
  os << "ptx " << ptx.size() << '\n' << ptx;
  return os.str();
}

KernelPackage KernelPackage::parse(std::string_view text) {
  KernelPackage package;
  size_t pos = 0;
  int line = 0;
  bool sawHeader = false, sawPtx = false, sawKeyGrid = false, sawPackedGrid = false;
  while (pos < text.size() && !sawPtx) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos)
      end = text.size();
    ++line;
    std::istringstream words{std::string(text.substr(pos, end - pos))};
    pos = end + 1;
    std::string key;
    if (!(words >> key))
      continue;
    std::vector<std::string> args;
    for (std::string word; words >> word;)
      args.push_back(word);
    auto expect = [&](size_t count) {
      if (args.size() != count)
        fail(line, "'" + key + "' takes " + std::to_string(count) + " value(s), got " +
                       std::to_string(args.size()));
    };
    if (!sawHeader) {
      if (key != "flashc-package")
        fail(line, "not a flashc kernel package (no 'flashc-package' header)");
      expect(1);
      if (toInt(args[0], line) != kFormatVersion)
        fail(line, "package format " + args[0] + " is not supported (this runtime reads " +
                       std::to_string(kFormatVersion) + ")");
      sawHeader = true;
      continue;
    }
    if (key == "flashc-version") { expect(1); package.flashcVersion = args[0]; }
    else if (key == "kernel") { expect(1); package.kernelName = args[0]; }
    else if (key == "arch") { expect(1); package.arch = args[0]; }
    else if (key == "variant-hash") { expect(1); package.variantHash = args[0]; }
    else if (key == "element-type") { expect(1); package.elementType = args[0]; }
    else if (key == "head-dim") { expect(1); package.headDim = toInt(args[0], line); }
    else if (key == "block-rows") { expect(1); package.blockRows = toInt(args[0], line); }
    else if (key == "block-cols") { expect(1); package.blockCols = toInt(args[0], line); }
    else if (key == "threads") { expect(1); package.threadsPerBlock = toInt(args[0], line); }
    else if (key == "dynamic-shared-bytes") {
      expect(1);
      package.dynamicSharedBytes = toInt(args[0], line);
    } else if (key == "grid") {
      if (args == std::vector<std::string>{"persistent", "tile-counter"})
        package.persistent = true;
      else if (args == std::vector<std::string>{"persistent"})
        fail(line, "a persistent kernel of flashc 0.2 (static tile schedule, no tile "
                   "counter argument): compile it again");
      else if (args == std::vector<std::string>{"ceil(M/block-cols)", "HKV", "B"})
        sawKeyGrid = true;
      else if (args == std::vector<std::string>{"ceil(G*N/block-rows)", "HKV", "B"})
        sawPackedGrid = true;
      else if (args != std::vector<std::string>{"ceil(N/block-rows)", "H", "B"})
        fail(line, "unknown grid rule");
    } else if (key == "static-sizes" || key == "dim-classes") {
      expect(6);
      std::vector<int64_t> &values =
          key == "static-sizes" ? package.staticSizes : package.dimClasses;
      for (const std::string &arg : args)
        values.push_back(toInt(arg, line));
    } else if (key == "param") {
      expect(3);
      if (args[1] != "i32" && args[1] != "f32")
        fail(line, "parameter type must be i32 or f32, got '" + args[1] + "'");
      package.params.push_back({args[0], args[1], toDouble(args[2], line)});
    } else if (key == "tensor") {
      if (args.size() < 3)
        fail(line, "'tensor' takes a name, an element type and extents");
      package.tensors.push_back({args[0], args[1], {args.begin() + 2, args.end()}});
    } else if (key == "kind") {
      expect(1);
      if (args[0] != "backward" && args[0] != "forward")
        fail(line, "kind must be forward or backward, got '" + args[0] + "'");
      package.backward = args[0] == "backward";
    } else if (key == "entry") {
      expect(4);
      if (args[0] != "preprocess" && args[0] != "convert" && args[0] != "summary" &&
          args[0] != "combine")
        fail(line, "entry role must be preprocess, convert, summary or combine, got '" +
                       args[0] + "'");
      package.entries.push_back(
          {args[0], args[1], toInt(args[2], line), toInt(args[3], line)});
    } else if (key == "block-summary") {
      expect(2);
      for (const std::string &arg : args)
        if (arg != "0" && arg != "1")
          fail(line, "'block-summary' takes 0 or 1 per batch entry and per head, got '" + arg +
                         "'");
      package.blockSummary = true;
      package.summaryPerBatch = args[0] == "1";
      package.summaryPerHead = args[1] == "1";
    } else if (key == "split-keys") {
      expect(0);
      package.splitKeys = true;
    } else if (key == "packed-heads") {
      expect(0);
      package.packedHeads = true;
    } else if (key == "paged-kv") {
      expect(3);
      package.pageSize = toInt(args[0], line);
      if (package.pageSize < 1 || package.pageSize > 4096)
        fail(line, "'paged-kv' takes a page of 1 to 4096 keys, got '" + args[0] + "'");
      if (args[1] == args[2])
        fail(line, "'paged-kv' needs two names for the block table and the key lengths");
      package.pageTable = args[1];
      package.pageLengths = args[2];
    } else if (key == "varlen") {
      expect(2);
      if (args[0] == "-" && args[1] == "-")
        fail(line, "'varlen' needs the offsets of the packed queries, keys or both");
      package.varlenQueries = args[0] == "-" ? "" : args[0];
      package.varlenKeys = args[1] == "-" ? "" : args[1];
    } else if (key == "column-slices") {
      expect(1);
      package.columnSlices = toInt(args[0], line);
      if (package.columnSlices < 2)
        fail(line, "'column-slices' takes 2 or more, got '" + args[0] + "'");
    } else if (key == "deterministic") {
      expect(0);
      package.deterministic = true;
    } else if (key == "kv-tensor-maps") {
      expect(0);
      package.kvTensorMaps = true;
    } else if (key == "ptx") {
      expect(1);
      int64_t bytes = toInt(args[0], line);
      if (bytes < 0 || pos + static_cast<size_t>(bytes) > text.size() + 1)
        fail(line, "the package is truncated: " + args[0] + " bytes of PTX announced");
      package.ptx = std::string(text.substr(std::min(pos, text.size()), bytes));
      sawPtx = true;
    } else {
      fail(line, "unknown key '" + key + "'");
    }
  }
  if (!sawHeader)
    fail(line, "empty kernel package");
  if (!sawPtx)
    fail(line, "no 'ptx' section");
  if (package.kernelName.empty() || package.blockRows <= 0 || package.threadsPerBlock <= 0 ||
      package.headDim <= 0 || package.staticSizes.size() != 6 || package.dimClasses.size() != 6)
    fail(line, "kernel, head-dim, block-rows, threads, static-sizes and dim-classes are required");
  if (package.backward &&
      (!sawKeyGrid || !package.entry("preprocess") || !package.entry("convert") ||
       package.blockCols <= 0))
    fail(line, "a backward package needs grid ceil(M/block-cols) HKV B, block-cols and its "
               "preprocess and convert entries");
  if (package.columnSlices != 1 &&
      (!package.backward || package.headDim % package.columnSlices))
    fail(line, "only a backward package splits D into column slices, and they must divide "
               "head-dim");
  if (!package.backward &&
      (sawKeyGrid || package.deterministic ||
       package.entries.size() != size_t(package.blockSummary) + size_t(package.splitKeys) ||
       (package.blockSummary && !package.entry("summary")) ||
       (package.splitKeys && !package.entry("combine"))))
    fail(line, "only a backward package has a per-key-block grid, a deterministic mode and "
               "preprocess/convert entries; a forward package has a summary entry exactly "
               "when it has a block-summary line and a combine entry exactly when it has a "
               "split-keys line");
  if (package.backward &&
      (package.splitKeys || package.entries.size() != 2 + size_t(package.blockSummary) ||
       package.entry("combine") || package.blockSummary != (package.entry("summary") != nullptr)))
    fail(line, "a backward package has no key splits, and a summary entry exactly when it has "
               "a block-summary line");
  if (package.persistent && package.splitKeys)
    fail(line, "a persistent grid does not split keys");
  if (package.packedHeads && (package.backward || package.persistent || package.blockSummary))
    fail(line, "packed-heads is a forward kernel's with one CTA per tile and no block summary");
  if (package.packedHeads != sawPackedGrid)
    fail(line, "a packed-heads line goes with grid ceil(G*N/block-rows) HKV B, and that grid "
               "with it");
  if (package.pageSize && (package.backward || package.persistent || package.blockSummary))
    fail(line, "paged-kv is a forward kernel's with one CTA per tile and no block summary");
  if ((package.packsQueries() || package.packsKeys()) && (package.backward || package.blockSummary))
    fail(line, "varlen is a forward kernel's without a block summary");
  if (package.packsQueries() && (package.splitKeys || package.packedHeads))
    fail(line, "packed varlen queries neither split keys nor pack GQA heads");
  if (package.packsKeys() && package.pageSize)
    fail(line, "a paged cache's keys are not packed by varlen offsets too");
  if (package.persistent && !package.kvTensorMaps)
    fail(line, "a persistent grid needs kv-tensor-maps (its Q comes by TMA too)");
  return package;
}

KernelPackage KernelPackage::load(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::InvalidArgument, "cannot open kernel package '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse(text.str());
  } catch (const Error &error) {
    throw Error(ErrorKind::InvalidArgument, path + ": " + error.what());
  }
}

void KernelPackage::save(const std::string &path) const {
  std::ofstream out(path, std::ios::binary);
  out << serialize();
  if (!out)
    throw Error(ErrorKind::InvalidArgument, "cannot write kernel package '" + path + "'");
}

} // namespace flashrt
