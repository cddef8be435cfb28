#!/usr/bin/env bash
# One call on the GPU machine: dsv4 bench on the CUDA backend, for the embedded model and for the
# synthetic DeepSeek-V4-Flash shapes, writing JSON receipts under $OUT. Binaries from $BIN (built
# anywhere with nvcc); run from the repository root. Each step has its own time limit so that one
# slow step cannot take the others' results with it.
#   BIN=DIR COMMIT=HASH OUT=DIR [FLASH_PROMPTS=2048,8192] [FLASH_LONG=131072 FLASH_LONG_LIMIT=300]
#   [FLASH_LAYERS=0] bash bench/run_cuda_bench.sh
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
export DSV4_COMMIT="${COMMIT:-unknown}" DSV4_SOURCE_DIR="$PWD"
log="$OUT/bench_log.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv > "$log" 2>&1
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "=== $name: $*" >> "$log"
    local start=$(date +%s)
    timeout "$limit" "$@" >> "$log" 2>&1
    echo "=== $name rc=$? $(( $(date +%s) - start ))s" >> "$log"
}
step tiny 120 "$BIN/dsv4" bench --model models/dsv4-tiny.gguf --filler models/retrieval_filler.txt \
    --a backend=cuda --prompt 512 --gen 128 --repeats 3 --json "$OUT/tiny-cuda.json"
step flash "${FLASH_LIMIT:-400}" "$BIN/dsv4" bench --synthetic flash --layers "${FLASH_LAYERS:-0}" \
    --prompt "${FLASH_PROMPTS:-2048,8192}" --gen "${FLASH_GEN:-32}" --repeats 1 --json "$OUT/flash.json"
# Long prompts (FLASH_LONG=131072) in their own process and time limit, so that one that runs out
# of time cannot take the shorter prompts' receipts with it.
if [ -n "${FLASH_LONG:-}" ]; then
    step flash_long "${FLASH_LONG_LIMIT:-300}" "$BIN/dsv4" bench --synthetic flash --layers "${FLASH_LAYERS:-0}" \
        --prompt "$FLASH_LONG" --gen "${FLASH_GEN:-32}" --repeats 1 --json "$OUT/flash-long.json"
fi
grep "===\|warm:\|dsv4:" "$log"
