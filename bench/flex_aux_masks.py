#!/usr/bin/env python3
"""FlexAttention with a BlockMask on flashc's own aux-tensor inputs.

  flex_aux_masks.py --mask document --aux DIR --B 1 --N 16384 --D 128 [--H 16]
  flex_aux_masks.py --mask key_padding --aux DIR --B 8 --N 4096 --D 128 [--H 16]
  flex_aux_masks.py ... --bwd      the backward alone (dQ, dK, dV from one
                                   forward's graph, random dO): peer "flex-bwd"

The tensors come from `flash-run examples/<mask>.flash ... --save-aux DIR`
(raw int32), so Flex and flashc see the same inputs: the time of a masked
call depends on the draw (the longest document, the key lengths).
  document     DIR/doc.bin, int32 [B, N]: causal within each document (the
               mask of examples/document.flash), bf16 like that example;
  key_padding  DIR/kv_len.bin, int32 [B]: key j of batch entry b is seen
               when j < kv_len[b] (examples/key_padding.flash), fp16.
Timing as ../shared/bench/peers_infer.py: CUDA events through
triton.testing.do_bench, median; create_block_mask timed once (including
its compile) and again. Prints one CSV row:
peer,mask,B,H,N,D,ms,mask_ms,visible_fraction,mask_again_ms.
"""
import argparse, os, time
import torch
import triton
from torch.nn.attention.flex_attention import flex_attention, create_block_mask

ap = argparse.ArgumentParser()
ap.add_argument("--mask", choices=["document", "key_padding"], required=True)
ap.add_argument("--aux", required=True, help="the directory flash-run --save-aux wrote")
ap.add_argument("--B", type=int, default=1)
ap.add_argument("--N", type=int, required=True)
ap.add_argument("--D", type=int, required=True)
ap.add_argument("--H", type=int, default=16)
ap.add_argument("--header", action="store_true")
ap.add_argument("--bwd", action="store_true", help="time the backward instead")
args = ap.parse_args()
dev = "cuda"
B, N, D, H = args.B, args.N, args.D, args.H


def load(name, count):
    path = os.path.join(args.aux, name + ".bin")
    if os.path.getsize(path) != 4 * count:
        raise SystemExit(f"{path}: {os.path.getsize(path)} bytes, expected {4 * count}")
    return torch.from_file(path, size=count, dtype=torch.int32).to(dev)


if args.mask == "document":
    doc = load("doc", B * N).view(B, N)
    if bool((doc[:, 1:] < doc[:, :-1]).any()):
        raise SystemExit("document ids are not sorted")
    dtype = torch.bfloat16

    def mask_mod(b, h, i, j):
        return (doc[b, i] == doc[b, j]) & (j <= i)

    lengths = [torch.bincount(row).double() for row in doc]
    visible = sum(float((n * (n + 1) / 2).sum()) for n in lengths) / (B * N * N)
else:
    kv_len = load("kv_len", B)
    dtype = torch.float16

    def mask_mod(b, h, i, j):
        return j < kv_len[b]

    visible = float(kv_len.clamp(max=N).double().sum()) / (B * N)

fl = torch.compile(flex_attention, dynamic=False)
torch.manual_seed(0)
q = torch.randn(B, H, N, D, device=dev, dtype=dtype, requires_grad=args.bwd)
k = torch.randn(B, H, N, D, device=dev, dtype=dtype, requires_grad=args.bwd)
v = torch.randn(B, H, N, D, device=dev, dtype=dtype, requires_grad=args.bwd)
times = []
for _ in range(2):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    bm = create_block_mask(mask_mod, B, None, N, N, device=dev)
    torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1e3)
fn = lambda: fl(q, k, v, block_mask=bm)
peer = "flex"
if args.bwd:
    out = fn()
    do = torch.randn_like(out)
    fn = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    peer = "flex-bwd"
fn()
ms = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
if args.header:
    print("peer,mask,B,H,N,D,ms,mask_ms,visible_fraction,mask_again_ms")
print(f"{peer},{args.mask},{B},{H},{N},{D},{ms:.4f},{times[0]:.1f},{visible:.5f},{times[1]:.2f}",
      flush=True)
