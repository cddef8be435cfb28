#!/usr/bin/env bash
# One call on the GPU machine that checks and measures what a CUDA change needs, most valuable
# first, each step under its own time limit and skipped when the call's remaining time would not
# cover it (a device session has about 30 minutes of H200 time: spend it in one or two calls).
#   1. the device tests (bench/run_cuda_tests.sh)                              ~1-2 min
#   2. the decode-step profile of 8 synthetic Flash layers + the PyTorch layers (profile_decode.sh)
#   3. the matvec microbenchmark (bench_cuda_matvec)
#   4. dsv4 bench on the embedded model and the full synthetic Flash (run_cuda_bench.sh)
# Binaries from $BIN (built anywhere with nvcc, carried); run from the repository root.
#   BIN=DIR OUT=DIR COMMIT=HASH [BUDGET=560] [STEPS="tests profile matvec flash"] bash bench/device_session.sh
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
export DSV4_COMMIT="${COMMIT:-unknown}" DSV4_SOURCE_DIR="$PWD"
budget=${BUDGET:-560}
steps=${STEPS:-tests profile matvec flash}
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
run_step() {  # run_step NAME NEEDS_SECONDS COMMAND...
    local name=$1 need=$2
    shift 2
    case " $steps " in *" $name "*) ;; *) return ;; esac
    if [ "$(left)" -lt "$need" ]; then
        echo "=== $name skipped: $(left) s left, it needs $need" | tee -a "$OUT/session.txt"
        return
    fi
    local t0=$(date +%s)
    timeout "$(left)" "$@" > "$OUT/$name.log" 2>&1
    echo "=== $name rc=$? $(( $(date +%s) - t0 ))s" | tee -a "$OUT/session.txt"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv > "$OUT/session.txt" 2>&1
run_step tests 60 env TEST_TIMEOUT=150 BIN="$BIN" OUT="$OUT" bash bench/run_cuda_tests.sh
run_step profile 90 env BIN="$BIN" OUT="$OUT" LAYERS=8 PROMPT=2048 bash bench/profile_decode.sh
run_step matvec 90 "$BIN/bench_cuda_matvec" --out "$OUT/matvec.json" --commit "${COMMIT:-unknown}"
run_step flash 240 env BIN="$BIN" OUT="$OUT" COMMIT="${COMMIT:-unknown}" FLASH_LIMIT=$(( $(left) - 30 )) \
    bash bench/run_cuda_bench.sh
# The summaries, last: failures, the decode step's parts, the bench lines.
grep -h "FAILED\|Failure" "$OUT/cuda_tests.txt" 2>/dev/null | head -20
sed -n '/^part/,/^$/p' "$OUT/profile_step.txt" 2>/dev/null
grep -h "warm:" "$OUT/bench_log.txt" 2>/dev/null
cat "$OUT/session.txt"
