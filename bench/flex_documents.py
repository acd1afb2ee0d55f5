#!/usr/bin/env python3
"""FlexAttention with a BlockMask on flashc's own packed-document inputs.

  flex_documents.py --doc DIR/doc.bin --N 16384 --D 128 [--H 16]

The document ids come from `flash-run examples/document.flash --docs K
--save-aux DIR` (int32, [B, N], B = 1), so Flex and flashc see the same
documents: ../shared/bench/peers_infer.py draws its own cut points, and the
time of a packed-document call depends on the realization (the longest
document dominates). The mask is examples/document.flash's: causal within
each document. Timing as peers_infer.py: CUDA events through
triton.testing.do_bench, median; create_block_mask timed once, eager.
Prints one CSV row (peer,mask,B,H,N,D,ms,mask_ms,visible_fraction,
mask_again_ms: a second create_block_mask, without the first's compile).
"""
import argparse, time
import torch
import triton
from torch.nn.attention.flex_attention import flex_attention, create_block_mask

ap = argparse.ArgumentParser()
ap.add_argument("--doc", required=True)
ap.add_argument("--N", type=int, required=True)
ap.add_argument("--D", type=int, required=True)
ap.add_argument("--H", type=int, default=16)
ap.add_argument("--header", action="store_true")
args = ap.parse_args()
dev = "cuda"
N, D, H = args.N, args.D, args.H
doc = torch.from_file(args.doc, size=N, dtype=torch.int32).to(dev)
if bool((doc[1:] < doc[:-1]).any()):
    raise SystemExit(f"{args.doc}: document ids are not sorted")


def document(b, h, i, j):
    return (doc[i] == doc[j]) & (j <= i)


fl = torch.compile(flex_attention, dynamic=False)
torch.manual_seed(0)
q = torch.randn(1, H, N, D, device=dev, dtype=torch.bfloat16)
k = torch.randn_like(q)
v = torch.randn_like(q)
torch.cuda.synchronize()
t0 = time.perf_counter()
bm = create_block_mask(document, None, None, N, N, device=dev)
torch.cuda.synchronize()
mask_ms = (time.perf_counter() - t0) * 1e3
# Again, as a training loop that builds a new mask per batch would (the
# first call includes compiling the mask function).
t0 = time.perf_counter()
bm = create_block_mask(document, None, None, N, N, device=dev)
torch.cuda.synchronize()
mask_again_ms = (time.perf_counter() - t0) * 1e3
lengths = torch.bincount(doc).double()
visible = float(((lengths * (lengths + 1)) / 2).sum()) / (N * N)
fn = lambda: fl(q, k, v, block_mask=bm)
fn()
ms = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
if args.header:
    print("peer,mask,B,H,N,D,ms,mask_ms,visible_fraction,mask_again_ms")
print(f"flex,document,1,{H},{N},{D},{ms:.4f},{mask_ms:.1f},{visible:.5f},{mask_again_ms:.2f}", flush=True)
