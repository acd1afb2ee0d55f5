# One SDPA cuDNN (or FA2) backward at a given shape, for ncu's per-kernel durations.
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[sys.argv[1]]
B, H, N, D, causal = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
for it in range(3):
    with sdpa_kernel(be):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(f"bwd{it}")
    o.backward(torch.randn_like(o))
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
