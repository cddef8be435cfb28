#!/usr/bin/env python3
"""Summarises an ncu CSV of a dsv4 bench run (bench/profile_decode.sh):
  * the kernels of the last complete decode step (between the last two launches of the
    embedding kernel), grouped by kernel name: count, total microseconds, share of the step;
  * the same step's time per part: attention (CSA layers apart), MoE, hyper-connections, head;
  * the first forward of the run (the prompt's prefill), grouped by kernel name.

    python3 bench/profile_step.py profile_kernels.csv
"""
import csv
import re
import sys
from collections import defaultdict


def read_kernels(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = v / 1000.0 if unit.startswith("n") else v if unit.startswith("u") else v * 1000.0
        name = re.sub(r"\(.*", "", r["Kernel Name"]).strip()
        name = re.sub(r"^void ", "", name)
        name = re.sub(r"^((\w+|<unnamed>|\(anonymous namespace\))::)+", "", name)
        rows.append((int(r["ID"]), name, us))
    rows.sort()
    return [(n, us) for _, n, us in rows]


def by_name(kernels, what, top=1000):
    total = sum(us for _, us in kernels)
    by = defaultdict(lambda: [0, 0.0])
    for n, us in kernels:
        by[n][0] += 1
        by[n][1] += us
    print(f"{what}: {len(kernels)} kernels, {total:.1f} us of kernel time")
    print(f"{'kernel':60s} {'count':>6s} {'us':>10s} {'share':>7s} {'us/call':>9s}")
    for n, (c, us) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{n[:60]:60s} {c:6d} {us:10.1f} {100 * us / total:6.1f}% {us / c:9.2f}")


def by_part(step):
    # Sub-layers: each layer runs [hc_pre, RMSNorm, attention, hc_post] then [hc_pre, RMSNorm,
    # MoE, hc_post]; the head follows the last hc_post. The hyper-connection part of a sub-layer
    # (its hc kernels and the RMSNorm right after them) is counted apart, so that "attention" and
    # "moe" hold what bench/torch_layers.py times. A CSA layer's attention runs the indexer.
    sums = defaultdict(lambda: [0, 0.0])
    segments, cur = [], []
    for n, us in step:
        cur.append((n, us))
        if n.startswith("hc_post"):
            segments.append(cur)
            cur = []
    for i, seg in enumerate(segments):
        kind = "attention" if i % 2 == 0 else "moe"
        if kind == "attention" and any("indexer" in n for n, _ in seg):
            kind = "attention_csa"
        hc = rest = 0.0
        prev = ""
        for n, us in seg:
            if n.startswith("hc_") or ("rmsnorm" in n and prev.startswith("hc_")):
                hc += us
            elif not n.startswith("embed"):
                rest += us
            prev = n
        sums[kind][0] += 1
        sums[kind][1] += rest
        sums["hyper_connections"][0] += 1
        sums["hyper_connections"][1] += hc
    sums["head"] = [1, sum(us for _, us in cur)]
    print(f"{'part':18s} {'count':>6s} {'us':>10s} {'us/each':>9s}")
    for n, (c, us) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:18s} {c:6d} {us:10.1f} {us / max(c, 1):9.2f}")


def main(path):
    rows = read_kernels(path)
    starts = [i for i, (n, _) in enumerate(rows) if "embed" in n]
    if len(starts) < 2:
        print("fewer than two embedding launches: no complete step in", path)
        return 1
    step = rows[starts[-2]:starts[-1]]
    by_name(step, "decode step")
    print()
    by_part(step)
    print()
    by_name(rows[starts[0]:starts[1]], "first forward (prefill)", top=25)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
