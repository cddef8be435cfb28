#!/usr/bin/env python3
"""Per-call bandwidth of the kernels of the last decode step in an ncu CSV taken with
--metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size (bench/profile_decode.sh
with CALLS=1): for each kernel name and grid size, the calls, microseconds per call, DRAM bytes
read per call and the achieved read bandwidth, sorted by total time; the step is the span
between the last two launches of the embedding kernel, as in bench/profile_step.py.

    python3 bench/profile_calls.py decode_calls.csv [HBM_GB_S]
"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"\(.*", "", name).strip()
    name = re.sub(r"^void ", "", name)
    return re.sub(r"^((\w+|<unnamed>|\(anonymous namespace\))::)+", "", name)


def read_calls(path):
    calls = defaultdict(dict)
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        c = calls[int(r["ID"])]
        c["name"] = short(r["Kernel Name"])
        v = r["Metric Value"].replace(",", "")
        unit = r.get("Metric Unit", "")
        m = r["Metric Name"]
        if m == "gpu__time_duration.sum":
            x = float(v)
            c["us"] = x / 1000.0 if unit.startswith("n") else x if unit.startswith("u") else x * 1000.0
        elif m == "dram__bytes_read.sum":
            scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(unit, 1)
            c["bytes"] = float(v) * scale
        elif m == "launch__grid_size":
            c["grid"] = int(float(v))
    return [calls[i] for i in sorted(calls)]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    hbm = float(sys.argv[2]) if len(sys.argv) > 2 else 3350.0
    calls = [c for c in read_calls(sys.argv[1]) if "us" in c]
    embeds = [i for i, c in enumerate(calls) if c["name"].startswith("embed_kernel")]
    if len(embeds) < 2:
        sys.exit("profile_calls: fewer than two embedding launches: no complete decode step in the CSV")
    step = calls[embeds[-2]:embeds[-1]]
    by = defaultdict(lambda: [0, 0.0, 0.0])
    for c in step:
        k = (c["name"], c.get("grid", 0))
        by[k][0] += 1
        by[k][1] += c["us"]
        by[k][2] += c.get("bytes", 0.0)
    total = sum(c["us"] for c in step)
    print(f"decode step: {len(step)} kernels, {total:.1f} us; bandwidth against {hbm:.0f} GB/s")
    print(f"{'kernel':48s} {'grid':>7s} {'calls':>5s} {'us/call':>8s} {'MB/call':>8s} {'GB/s':>7s} {'% HBM':>6s} {'share':>6s}")
    for (name, grid), (n, us, b) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        gbs = b / (us * 1e3) if us > 0 else 0.0
        print(f"{name[:48]:48s} {grid:7d} {n:5d} {us / n:8.2f} {b / n / 1e6:8.2f} {gbs:7.0f} {100 * gbs / hbm:5.1f}% "
              f"{100 * us / total:5.1f}%")


if __name__ == "__main__":
    main()
