#!/usr/bin/env bash
# One call on the GPU machine: where a decode step of the synthetic Flash spends its time.
# Runs dsv4 bench under ncu (graphs off, caches not flushed, clocks not locked, so each kernel's
# time is what it takes inside a real step, only serialised) and writes the per-kernel durations
# ($OUT/profile_kernels.csv) and a summary of the last decode step grouped by kernel name
# ($OUT/profile_step.txt, bench/profile_step.py). Binaries from $BIN; run from the repo root.
# CALLS=1 adds each call's DRAM bytes and grid ($OUT/decode_calls.csv, summarised per kernel and
# grid with the achieved bandwidth by bench/profile_calls.py into $OUT/profile_calls.txt).
#   BIN=DIR OUT=DIR [LAYERS=8] [PROMPT=2048] [DETAIL=kernel-regex] [CALLS=1] bash bench/profile_decode.sh
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
export DSV4_CUDA_GRAPHS=0
layers=${LAYERS:-8}
prompt=${PROMPT:-2048}
ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum \
    --log-file "$OUT/profile_kernels.csv" \
    "$BIN/dsv4" bench --synthetic flash --layers "$layers" --prompt "$prompt" --gen 3 --repeats 1 \
    --json "$OUT/profile_bench.json" > "$OUT/profile_log.txt" 2>&1
echo "ncu rc=$?" >> "$OUT/profile_log.txt"
python3 bench/profile_step.py "$OUT/profile_kernels.csv" > "$OUT/profile_step.txt" 2>&1
cat "$OUT/profile_step.txt" | head -60
# The PyTorch baseline of the attention and MoE layers at the same context, in the same call.
python3 bench/torch_layers.py "$OUT/torch_layers.json" "$prompt" > "$OUT/torch_layers.txt" 2>&1
cat "$OUT/torch_layers.txt"
# Optional: the bytes each decode call reads, against the measured HBM read rate of the run.
if [ -n "${CALLS:-}" ]; then
    ncu --clock-control none --cache-control none --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size \
        "$BIN/dsv4" bench --synthetic flash --layers "$layers" --prompt "$prompt" --gen 3 --repeats 1 \
        > "$OUT/decode_calls.csv" 2>&1
    echo "calls rc=$?"
    # The HBM rate from a run outside ncu (under it the streaming read kernel is profiled too and
    # reads as a tenth of the real rate).
    "$BIN/dsv4" bench --synthetic flash --layers 1 --prompt 16 --gen 2 --repeats 1 --json "$OUT/hbm_bench.json" \
        > /dev/null 2>&1
    hbm=$(python3 -c "import json; print(json.load(open('$OUT/hbm_bench.json'))['roofline']['bandwidth_bytes_s'] / 1e9)" 2>/dev/null || echo 3350)
    python3 bench/profile_calls.py "$OUT/decode_calls.csv" "$hbm" > "$OUT/profile_calls.txt" 2>&1
    head -40 "$OUT/profile_calls.txt"
fi
# Optional: ncu's detailed sections for the first decode calls of one kernel (DETAIL=regex).
if [ -n "${DETAIL:-}" ]; then
    ncu --clock-control none --kernel-name "regex:${DETAIL}" --launch-count "${DETAIL_COUNT:-6}" \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section LaunchStats --section SchedulerStats \
        "$BIN/dsv4" bench --synthetic flash --layers 2 --prompt 64 --gen 2 --repeats 1 > "$OUT/detail.txt" 2>&1
    echo "detail rc=$?"
fi
