"""How the PyTorch baselines (bench/torch_*.py) time an op: the same method as dsv4's kernel
benchmarks, so the figures compare. fn(i) runs call i (i selects rotated weights where the
caller rotates them beyond L2); 3 warm-up calls on a side stream, then a CUDA graph of CALLS
calls replayed REPLAYS times; per-call microseconds: (median, min, max) over the replays."""
import torch

CALLS, REPLAYS = 20, 7


def time_graph(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(CALLS):
            fn(i)
    g.replay()
    per = []
    for _ in range(REPLAYS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        per.append(1000.0 * e0.elapsed_time(e1) / CALLS)
    per.sort()
    return per[len(per) // 2], per[0], per[-1]
