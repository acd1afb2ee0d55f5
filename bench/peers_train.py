#!/usr/bin/env python3
"""One training step's attention for the peers: the forward, then the
backward from its output, timed together (CUDA events through
triton.testing.do_bench, median), the pair flashc's `flash-run --bwd
--train-step` times. Inputs as ../shared/bench/peers.py: bf16, random
normal, [B, H, N, D], B*N = 16384 tokens, H*D = 2048. TFLOP/s at 3.5x the
forward's count (4*B*H*N*N*D, halved when causal).

usage: peers_train.py [--hdims 64,128] [--seqs 1024,4096] [--peers sdpa-flash,sdpa-cudnn,flex]
Prints peer,dir,dtype,B,H,N,D,causal,ms,tflops rows (dir = train).
"""
import argparse
import torch
import triton

ap = argparse.ArgumentParser()
ap.add_argument("--hdims", default="64,128")
ap.add_argument("--seqs", default="1024,4096,16384")
ap.add_argument("--peers", default="sdpa-flash,sdpa-cudnn")
ap.add_argument("--tokens", type=int, default=16384)
args = ap.parse_args()

from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.nn.attention.flex_attention import flex_attention, create_block_mask
import torch.nn.functional as F

flex = torch.compile(flex_attention, dynamic=False)
backends = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}


def causal_mask(b, h, q, k):
    return q >= k


print("peer,dir,dtype,B,H,N,D,causal,ms,tflops")
torch.manual_seed(0)
for D in map(int, args.hdims.split(",")):
    H = 2048 // D
    for N in map(int, args.seqs.split(",")):
        B = max(1, args.tokens // N)
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
        for causal in (False, True):
            flops = 4 * B * H * N * N * D / (2 if causal else 1)
            bm = create_block_mask(causal_mask, None, None, N, N) if causal else None
            for peer in args.peers.split(","):
                try:
                    if peer == "flex":
                        fn = lambda: flex(q, k, v, block_mask=bm)
                    else:
                        def fn(be=backends[peer]):
                            with sdpa_kernel(be):
                                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                    def step():
                        # Gradients returned, not accumulated into .grad.
                        return torch.autograd.grad(fn(), (q, k, v), do)

                    step()
                    ms = triton.testing.do_bench(step, warmup=30, rep=150, return_mode="median")
                    print(f"{peer},train,bf16,{B},{H},{N},{D},{int(causal)},{ms:.4f},"
                          f"{3.5 * flops / ms / 1e9:.1f}", flush=True)
                except Exception as e:
                    print(f"{peer},train,bf16,{B},{H},{N},{D},{int(causal)},nan,nan,"
                          f"{type(e).__name__}: {str(e)[:80]}", flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()
