#!/usr/bin/env python3
"""PyTorch baseline for bench/cuda_matvec.cu, run on the GPU machine after it.

Reads the receipt that bench_cuda_matvec wrote, times torch's bf16 F.linear on the same shapes
and token counts (dense weights: one F.linear; expert stacks: one F.linear per active expert,
as a PyTorch MoE decode step does), with the same method (weights rotated beyond L2, a CUDA
graph of 20 calls, median of 7 replays), and adds the rows to the receipt (impl
"torch_bf16_linear"), against the roofline that the C++ run measured.

    python3 bench/torch_matvec.py RECEIPT.json
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch_timing import time_graph

ROTATE_BYTES = 256 << 20


def main():
    path = sys.argv[1]
    with open(path) as f:
        receipt = json.load(f)
    roof = receipt["roofline_GB_s"]
    shapes = {}
    for r in receipt["results"]:
        shapes.setdefault(r["shape"], r)
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(5)
    rows_out = []
    for name, r in shapes.items():
        rows, cols, stack, active, shared = r["rows"], r["cols"], r["matrices_in_stack"], r["matrices_per_call"], r["x_shared"]
        mat_bytes = rows * cols * 2
        copies = 1 if stack > 1 else max(1, min(16, -(-ROTATE_BYTES // mat_bytes)))
        w = (torch.rand((copies * stack, rows, cols), device=dev, generator=gen, dtype=torch.float32) * 0.1 - 0.05).to(torch.bfloat16)
        sets = [torch.randperm(stack, device="cpu")[:active].tolist() for _ in range(40)] if stack > 1 else None
        for T in sorted({x["T"] for x in receipt["results"] if x["shape"] == name}):
            n_x = 1 if shared else active
            x = torch.rand((n_x, T, cols), device=dev, generator=gen, dtype=torch.float32).to(torch.bfloat16)
            y = torch.empty((active, T, rows), device=dev, dtype=torch.float32)

            if stack == 1:
                def fn(i):
                    y[0].copy_(F.linear(x[0], w[i % copies]))
            else:
                def fn(i):
                    for j, e in enumerate(sets[i % 40]):
                        y[j].copy_(F.linear(x[0 if shared else j], w[e]))
            med, lo, hi = time_graph(fn)
            nbytes = mat_bytes * active + x.numel() * 2 + y.numel() * 4
            gbs = nbytes / (med * 1e3)
            row = {"shape": name, "rows": rows, "cols": cols, "matrices_in_stack": stack, "matrices_per_call": active,
                   "x_shared": shared, "T": T, "impl": "torch_bf16_linear", "weight_type": "BF16", "time_us": med,
                   "time_min_us": lo, "time_max_us": hi, "timing": "torch_cuda_graph_of_20_calls", "bytes": nbytes,
                   "GB_s": gbs, "roofline_pct": 100.0 * gbs / roof, "check": None,
                   "check_what": "none (F.linear output cast back to float32 by copy_)",
                   "torch_version": torch.__version__}
            rows_out.append(row)
            print(f"{name:32s} T={T} {'torch_bf16_linear':22s} BF16  {med:9.2f} us {gbs:7.0f} GB/s {100*gbs/roof:5.1f}%", flush=True)
        del w
        torch.cuda.empty_cache()
    receipt["results"].extend(rows_out)
    receipt["torch_version"] = torch.__version__
    with open(path, "w") as f:
        json.dump(receipt, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
