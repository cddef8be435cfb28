#!/usr/bin/env python3
"""Summarises an ncu CSV of a dsv4 bench run (bench/profile_decode.sh): the kernels of the last
complete decode step (between the last two launches of the embedding kernel), grouped by kernel
name, with count, total microseconds and share of the step."""
import csv
import re
import sys
from collections import defaultdict


def main(path):
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
        rows.append((int(r["ID"]), name, us))
    rows.sort()
    starts = [i for i, (_, n, _) in enumerate(rows) if "embed" in n]
    if len(starts) < 2:
        print("fewer than two embedding launches: no complete step in", path)
        return 1
    step = rows[starts[-2]:starts[-1]]
    total = sum(us for _, _, us in step)
    by = defaultdict(lambda: [0, 0.0])
    for _, n, us in step:
        by[n][0] += 1
        by[n][1] += us
    print(f"decode step: {len(step)} kernels, {total:.1f} us of kernel time")
    print(f"{'kernel':60s} {'count':>6s} {'us':>10s} {'share':>7s} {'us/call':>9s}")
    for n, (c, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{n[:60]:60s} {c:6d} {us:10.1f} {100 * us / total:6.1f}% {us / c:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
