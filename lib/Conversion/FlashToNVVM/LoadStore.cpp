//===- LoadStore.cpp - cp.async tile copies, the K/V pipeline, stores ------===//
//
// flash.load_q / flash.load_kv become 16-byte `cp.async.cg.shared.global`
// copies into the backend's shared-memory tiles (rows past the sequence
// length are zero-filled with src-size 0); flash.store writes O in the
// element type and LSE in f32, skipping rows past the query length.
//
// The K/V schedule (FlashAttention-2): K(lb) is copied before the key loop;
// in iteration kt the first use of K waits for it, then starts the copy of
// V(kt), which overlaps S = Q·Kᵀ and the softmax; the first use of V waits
// for it, then starts the copy of K(kt+1), which overlaps P·V. Each wait is
// `cp.async.wait_group 0` + `bar.sync`: the barrier also tells every warp
// that the others are done reading the buffer about to be overwritten.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

void KernelEmitter::waitForCopies(int64_t pendingGroups) {
  NVVM::CpAsyncWaitGroupOp::create(b, loc, pendingGroups);
  NVVM::Barrier0Op::create(b, loc);
}

void KernelEmitter::waitForKVBlock(flash::KVOperand) { waitForCopies(0); }

void KernelEmitter::skipKVBlock(Value next, Value upper) {
  // Nobody reads the K buffer in a skipped block: once this thread's copy
  // of K(kt) has landed, it may start K(kt+1) over it.
  NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  auto more = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::slt, next, upper),
                                /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(more.thenBlock()->getTerminator());
  issueKVCopy(pipeline->keyLoad, next, next);
}

LogicalResult KernelEmitter::lowerLoadQ(flash::LoadQOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  if (type.getDimSize(0) != config.br || type.getDimSize(1) != config.headDim ||
      type.getElementType() != config.elementType)
    return error(op, "query tile must be Br x D of the kernel's element type");
  if (queryLoad)
    return error(op, "one flash.load_q per kernel is supported");
  issueQueryCopy(op);
  TileValue tile;
  tile.kind = TileValue::Kind::Query;
  tile.source = op;
  tiles[op.getResult()] = tile;
  queryLoad = op;
  return success();
}

void KernelEmitter::issueQueryCopy(flash::LoadQOp op) {
  Value batch = lookupScalar(op.getBatch()), head = lookupScalar(op.getHead()),
        queryTile = lookupScalar(op.getQueryTile());
  if (kernel.getPackedHeads())
    return issuePackedQueryCopy(batch, head, queryTile);
  issueTileCopy(allThreads(), qPtr, sequenceOffset(qStrides, batch, head, queryRowStart),
                qStrides[2], queryTile, config.br, queryLen, smemQ);
}

void KernelEmitter::issuePackedQueryCopy(Value batch, Value kvHead, Value queryTile) {
  // Each row comes from its own head: every 16-byte chunk computes its
  // row's address (once per CTA, so the divisions are cheap next to the
  // key loop).
  Value packedLen = mul(queryLen, groupSize);
  Value firstRow = mul(queryTile, i32(config.br));
  Value firstHead = mul(kvHead, groupSize);
  issueRowwiseTileCopy(allThreads(), qPtr, config.br, smemQ, [&](Value row) -> std::pair<Value, Value> {
    Value packedRow = add(firstRow, row);
    Value valid = cmpI(arith::CmpIPredicate::ult, packedRow, packedLen);
    // Padding rows copy 0 bytes (zero fill) from row 0 of the group.
    Value clamped = select(valid, packedRow, i32(0));
    Value head = add(firstHead, arith::RemUIOp::create(b, loc, clamped, groupSize));
    Value position = arith::DivUIOp::create(b, loc, clamped, groupSize);
    return {add(headOffset(qStrides, batch, head), mul(toI64(position), qStrides[2])), valid};
  });
}

void KernelEmitter::issueKVCopy(flash::LoadKVOp op, Value /*position*/, Value keyTile) {
  bool isKey = op.getOperand() == flash::KVOperand::Key;
  Value *strides = isKey ? kStrides : vStrides;
  Value batch = lookupScalar(op.getBatch()), kvHead = lookupScalar(op.getKvHead());
  if (kernel.getPagedKvAttr())
    return issuePagedTileCopy(allThreads(), isKey ? kPtr : vPtr, strides, batch, kvHead,
                              keyTile, isKey ? smemK : smemV);
  issueTileCopy(allThreads(), isKey ? kPtr : vPtr,
                sequenceOffset(strides, batch, kvHead, keyRowStart), strides[2], keyTile,
                config.bc, keyLen, isKey ? smemK : smemV);
}

LogicalResult KernelEmitter::lowerLoadKV(flash::LoadKVOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  if (type.getDimSize(0) != config.bc || type.getDimSize(1) != config.headDim ||
      type.getElementType() != config.elementType)
    return error(op, "key/value block must be Bc x D of the kernel's element type");
  if (!pipeline || (op != pipeline->keyLoad && op != pipeline->valueLoad))
    return error(op, "K/V blocks must be loaded inside the scf.for over key blocks");
  TileValue tile;
  tile.kind = TileValue::Kind::KeyValue;
  tile.operand = op.getOperand();
  tile.source = op;
  tiles[op.getResult()] = tile;
  return success();
}

void KernelEmitter::acquireQuery(int64_t pendingGroups) {
  waitForCopies(pendingGroups);
  if (config.qInRegisters)
    loadQueryRegisters();
  queryAcquired = true;
}

LogicalResult KernelEmitter::checkKVUse(Operation *user, const TileValue &tile) {
  if (!pipeline || (tile.source != pipeline->keyLoad && tile.source != pipeline->valueLoad))
    return error(user, "uses a K/V block outside its key loop");
  if (user->getBlock() != tile.source->getBlock())
    return error(user, "K/V blocks must be used in the block that loads them");
  return success();
}

LogicalResult KernelEmitter::acquireKV(Operation *user, const TileValue &tile) {
  if (failed(checkKVUse(user, tile)))
    return failure();
  KVPipeline &state = *pipeline;
  auto acquireKey = [&] {
    if (state.keyAcquired)
      return;
    waitForKVBlock(flash::KVOperand::Key);
    // The wait above also covered the Q copy (committed before K's).
    if (queryLoad && !config.qInRegisters)
      queryAcquired = true;
    if (state.valueLoad)
      issueKVCopy(state.valueLoad, state.inductionVar, state.block);
    state.keyAcquired = true;
  };
  acquireKey();
  if (tile.operand == flash::KVOperand::Key || state.valueAcquired)
    return success();
  waitForKVBlock(flash::KVOperand::Value);
  Value next = add(state.inductionVar, state.step);
  auto more = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::slt, next, state.upperBound),
                                /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(more.thenBlock()->getTerminator());
    issueKVCopy(state.keyLoad, next, state.nextBlock(next));
  }
  state.valueAcquired = true;
  return success();
}

SmallVector<Value> KernelEmitter::transposeQuad(ArrayRef<Value> words, Value bit0, Value bit1) {
  // Thread t of the quad holds words[i] = M[t][i]; afterwards it holds
  // M[0..3][t]. Two butterfly stages: across lanes t ^ 2 the off-diagonal
  // 2 x 2 blocks swap, across t ^ 1 the elements inside them.
  Value y0 = shuffleXor(select(bit1, words[0], words[2]), 2);
  Value y1 = shuffleXor(select(bit1, words[1], words[3]), 2);
  Value c0 = select(bit1, y0, words[0]), c1 = select(bit1, y1, words[1]);
  Value c2 = select(bit1, words[2], y0), c3 = select(bit1, words[3], y1);
  Value z0 = shuffleXor(select(bit0, c0, c1), 1);
  Value z1 = shuffleXor(select(bit0, c2, c3), 1);
  return {select(bit0, z0, c0), select(bit0, c1, z0), select(bit0, z1, c2),
          select(bit0, c3, z1)};
}

LogicalResult KernelEmitter::lowerStore(flash::StoreOp op) {
  auto outIt = tiles.find(op.getOutput());
  auto lseIt = tiles.find(op.getLse());
  if (outIt == tiles.end() || lseIt == tiles.end() ||
      outIt->second.kind != TileValue::Kind::Accum || outIt->second.cols != config.headDim)
    return error(op, "stores a Br x D f32 tile and a row vector");
  const TileValue &out = outIt->second, &lse = lseIt->second;
  Value batch = lookupScalar(op.getBatch()), head = lookupScalar(op.getHead()),
        queryTile = lookupScalar(op.getQueryTile());
  if (!op.getSplit()) {
    storeOutput(out, lse, batch, head, queryTile);
    return success();
  }
  Value split = lookupScalar(op.getSplit());
  if (!split || !splitCount)
    return error(op, "names a split the kernel does not take");
  // S is uniform over the grid: every thread takes the same branch.
  auto ifSplit = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ugt, splitCount, i32(1)),
                                   /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(ifSplit.thenBlock()->getTerminator());
  storePartialState(out, lse, batch, head, queryTile, split);
  b.setInsertionPoint(ifSplit.elseBlock()->getTerminator());
  storeOutput(out, lse, batch, head, queryTile);
  return success();
}

void KernelEmitter::storePartialState(const TileValue &out, const TileValue &lse, Value batch,
                                      Value head, Value queryTile, Value split) {
  // Row i of (split, b, h): ((split·B + b)·H + h)·N + i of [S, B, H, N].
  Value splitBatch = add(mul(toI64(split), toI64(batchSize)), toI64(batch));
  auto stateHead = [&](Value queryHead) {
    return mul(add(mul(splitBatch, toI64(headCount)), toI64(queryHead)), toI64(queryLen));
  };
  // A packed tile's rows come from G heads; an unpacked tile's share one,
  // computed once before the row branches.
  Value tileHead = kernel.getPackedHeads() ? Value() : stateHead(head);
  SmallVector<QueryRow> rows = storedRows(head, queryTile);
  Value writesLse = cmpI(arith::CmpIPredicate::eq, threadInGroup, i32(0));
  int64_t nTiles = config.accTiles();
  auto pairType = VectorType::get({2}, b.getF32Type());
  for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
    for (int64_t half = 0; half < 2; ++half) {
      const QueryRow &row = rows[2 * mb + half];
      auto inside = scf::IfOp::create(b, loc, row.inside, /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(inside.thenBlock()->getTerminator());
      Value stateRow = add(tileHead ? tileHead : stateHead(row.head), toI64(row.position));
      Value rowOffset = mul(stateRow, i64(config.headDim));
      // The thread's two adjacent columns of each n-tile as one 8-byte store.
      for (int64_t nt = 0; nt < nTiles; ++nt) {
        const Value *reg = &out.regs[(mb * nTiles + nt) * 4 + 2 * half];
        Value pair = LLVM::PoisonOp::create(b, loc, pairType);
        pair = LLVM::InsertElementOp::create(b, loc, pair, reg[0], i32(0));
        pair = LLVM::InsertElementOp::create(b, loc, pair, reg[1], i32(1));
        Value address =
            gepElements(splitOutPtr, add(rowOffset, toI64(fragmentCol(nt, 0))), b.getF32Type());
        LLVM::StoreOp::create(b, loc, pair, address, /*alignment=*/8);
      }
      auto lseWriter = scf::IfOp::create(b, loc, writesLse, /*withElseRegion=*/false);
      b.setInsertionPoint(lseWriter.thenBlock()->getTerminator());
      LLVM::StoreOp::create(b, loc, lse.regs[2 * mb + half],
                            gepElements(splitLsePtr, stateRow, b.getF32Type()), /*alignment=*/4);
    }
}

LogicalResult KernelEmitter::lowerSplitKeyRange(flash::SplitKeyRangeOp op) {
  Value split = lookupScalar(op.getSplit()), blocks = lookupScalar(op.getBlocks());
  if (!split || !blocks || !splitCount)
    return error(op, "needs a split_keys kernel's split and a block count");
  // In i64: blocks · S may pass 2^31 for long keys and many splits.
  auto bound = [&](Value part) {
    Value scaled = arith::DivUIOp::create(b, loc, mul(toI64(blocks), toI64(part)),
                                          toI64(splitCount));
    return arith::TruncIOp::create(b, loc, b.getI32Type(), scaled).getResult();
  };
  scalars.map(op.getLower(), bound(split));
  scalars.map(op.getUpper(), bound(add(split, i32(1))));
  return success();
}

void KernelEmitter::storeOutput(const TileValue &out, const TileValue &lse, Value batch,
                                Value head, Value queryTile) {
  // LSE is dense [B, H, N], or [H, rows] for packed varlen queries. A
  // packed tile's rows come from G heads, each row addressing its own; an
  // unpacked tile's share one, computed once before the row branches.
  auto lseHeadOf = [&](Value queryHead) {
    if (queryRowStart)
      return add(mul(toI64(queryHead), toI64(queryRows)), queryRowStart);
    return mul(add(mul(toI64(batch), toI64(headCount)), toI64(queryHead)),
               toI64(launchSizeOf(flash::DimRole::QueryLen)));
  };
  bool packed = kernel.getPackedHeads();
  Value outHead = packed ? Value() : sequenceOffset(oStrides, batch, head, queryRowStart);
  Value lseHead = packed ? Value() : lseHeadOf(head);
  SmallVector<QueryRow> rows = storedRows(head, queryTile);
  Value writesLse = cmpI(arith::CmpIPredicate::eq, threadInGroup, i32(0));
  int64_t nTiles = config.accTiles();
  // A thread holds 2 adjacent columns of every 8-column n-tile, so a plain
  // store writes 4 bytes and a warp's store 16 bytes per row. With wide
  // stores (D a multiple of 32) the quad transposes its words first: thread
  // t then holds all 8 columns of n-tile 4k + t and writes them as 16 bytes
  // (the launch contract asks o for 16-byte alignment and strides of 8
  // elements). The shuffles run in every lane, before the row test.
  bool wide = storesWide() && nTiles % 4 == 0;
  Type wordType = b.getI32Type();
  auto vectorType = VectorType::get({4}, wordType);
  // The quad lane's two bits, which steer both transpose stages.
  Value bit0, bit1;
  if (wide) {
    auto laneBit = [&](int64_t mask) {
      return cmpI(arith::CmpIPredicate::ne, arith::AndIOp::create(b, loc, threadInGroup, i32(mask)),
                  i32(0));
    };
    bit1 = laneBit(2);
    bit0 = laneBit(1);
  }
  for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
    for (int64_t half = 0; half < 2; ++half) {
      SmallVector<Value> words;
      for (int64_t nt = 0; nt < nTiles; ++nt) {
        const Value *reg = &out.regs[(mb * nTiles + nt) * 4 + 2 * half];
        words.push_back(packHalves(reg[0], reg[1]));
      }
      if (wide)
        for (int64_t first = 0; first < nTiles; first += 4) {
          SmallVector<Value> column = transposeQuad(ArrayRef(words).slice(first, 4), bit0, bit1);
          std::copy(column.begin(), column.end(), words.begin() + first);
        }
      const QueryRow &row = rows[2 * mb + half];
      auto inside = scf::IfOp::create(b, loc, row.inside, /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(inside.thenBlock()->getTerminator());
      Value rowOffset = add(packed ? headOffset(oStrides, batch, row.head) : outHead,
                            mul(toI64(row.position), oStrides[2]));
      if (wide) {
        Value ownTile = mul(threadInGroup, i32(8));
        for (int64_t first = 0; first < nTiles; first += 4) {
          Value vector = LLVM::PoisonOp::create(b, loc, vectorType);
          for (int64_t i = 0; i < 4; ++i)
            vector = LLVM::InsertElementOp::create(b, loc, vector, words[first + i], i32(i));
          Value column = add(ownTile, i32(first * 8));
          Value address = gepElements(oPtr, add(rowOffset, toI64(column)), b.getI16Type());
          LLVM::StoreOp::create(b, loc, vector, address, /*alignment=*/16);
        }
      } else {
        for (int64_t nt = 0; nt < nTiles; ++nt) {
          Value address =
              gepElements(oPtr, add(rowOffset, toI64(fragmentCol(nt, 0))), b.getI16Type());
          LLVM::StoreOp::create(b, loc, words[nt], address, /*alignment=*/4);
        }
      }
      auto lseWriter = scf::IfOp::create(b, loc, writesLse, /*withElseRegion=*/false);
      b.setInsertionPoint(lseWriter.thenBlock()->getTerminator());
      Value lseAddress = gepElements(lsePtr, add(packed ? lseHeadOf(row.head) : lseHead,
                                                 toI64(row.position)),
                                     b.getF32Type());
      LLVM::StoreOp::create(b, loc, lse.regs[2 * mb + half], lseAddress, /*alignment=*/4);
    }
}
