#!/usr/bin/env python3
"""PyTorch baseline for the attention and MoE layers of DeepSeek-V4-Flash at batch 1, to compare
side by side with dsv4's CUDA kernels in the same device call (bench/profile_decode.sh runs
both; bench/profile_step.py sums dsv4's kernels of each phase).

A straightforward PyTorch implementation of the same shapes, bf16 weights (torch has no Q8_0 or
Q2_K kernels, so it reads 2x / 6x the weight bytes dsv4 reads), float32 softmax, timed as CUDA
graphs of 20 calls (median of 7 replays) so that host launch cost is left out, as dsv4's decode
graphs leave it out:
  attention (a CSA layer, the most expensive kind): q_a, RMSNorm, q_b, per-head RMSNorm, kv
    projection, RMSNorm, indexer (q projection, scores against ctx/4 compressed rows, top-512),
    attention of 64 heads over the 512 picked compressed rows + the 128-row window with a sink
    per head, grouped output (8 groups x o_lora 1024) and o_b;
  moe: router (F32 [256, 4096]), sqrt(softplus) scores, top-6, 6 routed experts of
    [2048, 4096] gate/up/down with SwiGLU (one F.linear each, as a PyTorch MoE decode does),
    the shared expert, the weighted combine.
Rotary embeddings and the compressors' window closes are left out of the torch side (small
elementwise work), which favours torch.

    python3 bench/torch_layers.py OUT.json [CTX ...]
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch_timing import time_graph

D, H, HD, QL, OG, OL, WIN, IH, ID, TOPK = 4096, 64, 512, 1024, 8, 1024, 128, 64, 128, 512
E, K, INTER = 256, 6, 2048


def rms(x, w=None, eps=1e-6):
    y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (y * w if w is not None else y).to(x.dtype)


def main():
    out = sys.argv[1]
    ctxs = [int(c) for c in sys.argv[2:]] or [2048, 8192]
    dev = torch.device("cuda")
    bf = torch.bfloat16
    torch.manual_seed(3)

    def w(*shape, dtype=bf):
        return (torch.randn(*shape, device=dev) * 0.02).to(dtype)

    # Attention weights (one layer).
    q_a, q_b, kv_w = w(QL, D), w(H * HD, QL), w(HD, D)
    q_a_n, kv_n = torch.ones(QL, device=dev, dtype=bf), torch.ones(HD, device=dev, dtype=bf)
    o_a, o_b = w(OG, OL, H * HD // OG), w(D, OG * OL)
    iq_b, i_proj = w(IH * ID, QL), w(IH, D)
    sinks = torch.zeros(H, device=dev)
    # MoE weights (one layer): all 256 experts resident, as in the model.
    router = w(E, D, dtype=torch.float32)
    gate_e, up_e, down_e = w(E, INTER, D), w(E, INTER, D), w(E, D, INTER)
    gate_s, up_s, down_s = w(INTER, D), w(INTER, D), w(D, INTER)

    x = torch.randn(1, D, device=dev).to(bf)
    results = []
    for ctx in ctxs:
        n_comp = ctx // 4
        comp = torch.randn(n_comp, HD, device=dev).to(bf)      # compressed latent rows
        idx_rows = torch.randn(n_comp, ID, device=dev).to(bf)  # indexer keys
        window = torch.randn(WIN, HD, device=dev).to(bf)

        def attention():
            qr = rms(F.linear(x, q_a), q_a_n)
            q = rms(F.linear(qr, q_b).view(1, H, HD))
            kv = rms(F.linear(x, kv_w), kv_n)
            qi = F.linear(qr, iq_b).view(IH, ID)
            wi = F.linear(x, i_proj).view(IH) * IH ** -0.5
            scores = (torch.relu(qi @ idx_rows.T) * wi[:, None]).sum(0)
            picked = torch.topk(scores, min(TOPK, n_comp)).indices
            rows = torch.cat([comp[picked], window[1:], kv], 0)  # [picked + window, HD]
            logits = (q[0].float() @ rows.float().T) * HD ** -0.5  # [H, rows]
            m = torch.maximum(logits.max(-1).values, sinks)
            p = torch.exp(logits - m[:, None])
            den = p.sum(-1) + torch.exp(sinks - m)
            o = ((p @ rows.float()) / den[:, None]).to(bf).view(OG, H * HD // OG)
            u = torch.einsum("gi,goi->go", o, o_a).reshape(1, OG * OL)
            return F.linear(u, o_b)

        sel = [int(e) for e in torch.randperm(E)[:K]]  # python ints: views of the stacks, no copies

        def moe():
            lg = F.linear(x.float(), router)
            sc = torch.sqrt(F.softplus(lg))[0]
            wts, ids = torch.topk(sc, K)
            wts = wts / wts.sum()
            y = torch.zeros(1, D, device=dev, dtype=torch.float32)
            for j, e in enumerate(sel):  # fixed experts: a graph cannot take data-dependent views
                h = F.silu(F.linear(x, gate_e[e])) * F.linear(x, up_e[e])
                y = y + wts[j] * F.linear(h, down_e[e]).float()
            hs = F.silu(F.linear(x, gate_s)) * F.linear(x, up_s)
            return y + F.linear(hs, down_s).float()

        for name, fn in (("attention_csa", attention), ("moe", moe)):
            t = time_graph(lambda i, fn=fn: fn())[0]
            results.append({"layer": name, "T": 1, "context": ctx, "impl": "torch_bf16", "time_us": t})
            print(f"torch {name:14s} T=1 ctx={ctx:6d} {t:9.1f} us", flush=True)
    with open(out, "w") as f:
        json.dump({"bench": "torch_layers", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
